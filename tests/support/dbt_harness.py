"""Render and run this package's dbt macros in-process, for tests.

dbt runs inside the pytest process through ``dbt.cli.main.dbtRunner`` against the
``integration_tests/`` project (which installs the package with ``- local: ../``).
``profiles.yml`` is generated into a temporary directory with two targets:

* ``postgres``: the embedded PostgreSQL server of the ``pg_uri`` fixture (its Unix-socket
  directory is the profile's ``host``);
* ``spark``: dbt-spark's ``session`` method, which calls ``SparkSession.builder.getOrCreate()``
  and therefore reuses the test session of the ``spark`` fixture.

A target's server is only started when a test first uses that target, so a test that
renders for PostgreSQL never starts Spark and vice versa.

Speed: starting dbt and parsing the project costs about a second, rendering with an
already parsed manifest about 50 ms. ``dbt deps`` runs once per harness, the manifest
is parsed once per target and reused, and :meth:`DbtHarness.render_many` renders any
number of snippets in one invocation. Batch your snippets. dbt compiles every macro it
calls from its Jinja source again in each invocation (half the time of a ``setup_feed``
run-operation); a harness therefore makes the process keep compiled templates, see
:func:`keep_compiled_templates`. It also stops dbt-adapters from adding to its default
behaviour flags on every invocation, which made each invocation slower than the one
before (:func:`keep_behavior_flags_fixed`). And every project a test builds is parsed
whole, its package's ~850 macros included, because partial parsing needs the project's
own earlier parse: :func:`keep_parsed_jinja` turns on dbt's own caches for test suites.
:func:`speed_up_in_process_dbt` does all three; any process that runs dbt in-process many
times (the kill-scenario drivers) calls it, and ``tests/conftest.py`` turns the parse
caches on for every test process.

API
---
``DbtHarness(workdir, *, postgres_uri=None, spark=None, project_dir=INTEGRATION_TESTS)``
    ``postgres_uri`` and ``spark`` are callables run on first use of that target (the
    fixture passes ``lambda: request.getfixturevalue("pg_uri")`` and likewise for
    ``spark``), so the harness starts only what a test needs.
``render(jinja_sql: str, target: str) -> str``
    Compile one Jinja-SQL snippet (``dbt compile --inline``) and return the SQL text.
``render_many(jinja_sqls: Sequence[str], target: str) -> list[str]``
    The same for many snippets in a single dbt invocation. If any snippet fails, the
    whole call raises; render the suspects alone to find which.
``run_operation(macro: str, args: Mapping[str, Any] | None = None, target: str) -> list[str]``
    ``dbt run-operation`` (``args`` passed as ``--args`` YAML); returns the messages the
    macro logged with ``log()``, in order. ``target`` is required, positionally or by
    keyword. Raises :class:`DbtError` if the operation fails.
``invoke(args: Sequence[str], target: str, *, on_log=None) -> dbtRunnerResult``
    Any other dbt command, with the project, profile, target and temporary paths filled
    in; ``on_log(message)`` receives every ``log()`` message of the invocation.

Helpers: ``package_project(root, name, models) -> Path`` writes a scratch dbt project that
installs this package (for ``project_dir``); ``call(macro, *args, package="changefeed")
-> str`` writes the snippet
``{{ changefeed.macro('arg', ...) }}`` (arguments as Jinja string literals), and
``sqlserver_calls(macro, *arg_lists) -> list[str]`` one ``sqlserver__<macro>`` call per
argument list.

Every failure raises :class:`DbtError` whose message is dbt's (e.g. a macro's
``exceptions.raise_compiler_error`` text), so ``pytest.raises(DbtError, match=...)`` works.

The ``dbt`` fixture in ``tests/conftest.py`` gives one harness per test session::

    def test_pg(dbt, pg_uri):
        sql = dbt.render("select {{ changefeed.ulid_to_string('u') }} from t", "postgres")

T-SQL
-----
dbt-sqlserver cannot be imported here (pyodbc needs ``libodbc.so``), so there is no
``sqlserver`` target. Render the SQL Server implementations by calling them explicitly
under the ``postgres`` target::

    dbt.render("{{ changefeed.sqlserver__ulid_to_string('x') }}", "postgres")
    dbt.render_many(sqlserver_calls("ulid_to_string", ["x"], ["t.id"]), "postgres")

This works as long as a ``sqlserver__`` implementation does not itself dispatch (through
``adapter.dispatch`` or dbt's cross-database macros such as ``dbt.concat``) or read
``target.type``: under the postgres target those resolve to PostgreSQL. Call other
``sqlserver__``/private helpers explicitly from T-SQL implementations.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
import urllib.parse
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
INTEGRATION_TESTS = REPO_ROOT / "integration_tests"
PROFILE_NAME = "changefeed_integration_tests"
#: The schema dbt's targets use (models, seeds, run_query without a schema).
SCHEMA = "cf_dbtkit"
TARGETS = ("postgres", "spark")

_MARKER = "-- @@dbtkit-{token}-{index}@@"


class DbtError(RuntimeError):
    """A dbt invocation failed; the message is dbt's own error text."""


def sqlserver_calls(macro: str, *arg_lists: Sequence[str]) -> list[str]:
    """Jinja snippets that call ``changefeed.sqlserver__<macro>`` explicitly.

    Each positional argument is one call's list of SQL-expression arguments, passed to
    the macro as string literals.

    >>> sqlserver_calls("ulid_timestamp", ["x"], ["y"])[1]
    "{{ changefeed.sqlserver__ulid_timestamp('y') }}"
    """
    return [call("sqlserver__" + macro, *args) for args in arg_lists]


def package_project(root: Path, name: str, models: Mapping[str, str]) -> Path:
    """A dbt project at ``root`` that installs this package and uses the harness's profile,
    with ``models`` (file name -> text) in ``models/``; for a ``DbtHarness(project_dir=...)``."""
    (root / "models").mkdir(parents=True, exist_ok=True)
    (root / "dbt_project.yml").write_text(
        f"name: {name}\nversion: '0.1.0'\nconfig-version: 2\n"
        "profile: changefeed_integration_tests\nmodel-paths: ['models']\n"
        "packages-install-path: \"{{ env_var('CHANGEFEED_DBT_PACKAGES_DIR', 'dbt_packages') }}\"\n"
    )
    (root / "packages.yml").write_text(f"packages:\n  - local: {REPO_ROOT}\n")
    for file_name, text in models.items():
        (root / "models" / file_name).write_text(text)
    return root


def call(macro: str, *args: str, package: str = "changefeed") -> str:
    """A Jinja snippet ``{{ package.macro('arg', ...) }}`` with string-literal arguments.

    >>> call("ulid_timestamp", "t.id")
    "{{ changefeed.ulid_timestamp('t.id') }}"
    """
    rendered = ", ".join(_jinja_string(a) for a in args)
    return "{{ " + f"{package}.{macro}({rendered})" + " }}"


def _jinja_string(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


_COMPILED: dict[tuple[str, bool, bool], Any] = {}


def keep_compiled_templates() -> None:
    """Make dbt in this process compile each Jinja source once instead of once per invocation.

    dbt builds a fresh Jinja environment per template and compiles the template's source
    to Python code every time a macro is called in a new invocation. The compiled code is a
    function of the source and of the environment kind alone (``capture_macros`` only swaps
    the class used for undefined names, ``native`` the code generator), so reusing it gives
    the same templates; each call still gets its own environment and globals, as in dbt.
    Idempotent.
    """
    import dbt.clients.jinja as dbt_jinja
    import dbt_common.clients.jinja as common_jinja

    if getattr(common_jinja.get_template, "keeps_compiled_code", False):
        return

    def get_template(
        string: str,
        ctx: dict[str, Any],
        node: Any = None,
        capture_macros: bool = False,
        native: bool = False,
    ) -> Any:
        # The body of dbt_common.clients.jinja.get_template, with env.from_string split
        # into compile (cached) and Template.from_code (per call), as from_string does.
        with common_jinja.catch_jinja(node):
            env = common_jinja.get_environment(node, capture_macros, native=native)
            source = str(string)
            key = (source, capture_macros, native)
            code = _COMPILED.get(key)
            if code is None:
                code = _COMPILED[key] = env.compile(source)
            return env.template_class.from_code(env, code, env.make_globals(ctx), None)

    get_template.keeps_compiled_code = True  # type: ignore[attr-defined]
    common_jinja.get_template = get_template
    dbt_jinja.get_template = get_template  # imported there by name


def keep_behavior_flags_fixed() -> None:
    """Stop dbt-adapters from growing its default behaviour flags on every invocation.

    ``BaseAdapter.__init__`` hands the module-level ``DEFAULT_BASE_BEHAVIOR_FLAGS`` list to
    the ``behavior`` setter, which extends it in place with the adapter's own flags; so in
    a process that invokes dbt again and again the list gains one entry per invocation, and
    each entry calls ``inspect.stack()`` when the next adapter is built. After 120
    invocations in a pytest worker, setting up the adapter took 1.8 s of a 2 s render
    (dbt-sqlserver works around the same bug in its own setter). The patched setter extends
    a copy, which is what a single ``dbt`` command sees. Idempotent.
    """
    from dbt.adapters.base.impl import BaseAdapter

    current = BaseAdapter.__dict__["behavior"]
    if getattr(current.fset, "copies_flags", False):
        return
    extend_in_place = current.fset

    def set_behavior(self: Any, flags: list[Any]) -> None:
        extend_in_place(self, list(flags))

    set_behavior.copies_flags = True  # type: ignore[attr-defined]
    BaseAdapter.behavior = current.setter(set_behavior)


def keep_parsed_jinja() -> None:
    """Make dbt in this process parse each Jinja source once: its switch for test suites
    (``dbt_common.tests.enable_test_caching``, which dbt's own test fixtures turn on).

    Parsing a project extracts the blocks of every macro file, parses each macro and
    parses it again to find the macros it calls; with the switch, each of the three is
    kept by the source text, so a second project with the same package (every scratch
    project of the tests) reuses them. A project's own files are parsed as before. In
    tests/test_docs_samples.py that parsing was two thirds of the module's time.
    Idempotent; cheap to import (it does not import dbt itself).
    """
    from dbt_common.tests import enable_test_caching

    enable_test_caching()


def speed_up_in_process_dbt() -> None:
    """Make each of many dbt invocations in this process cost what a single one does:
    :func:`keep_compiled_templates`, :func:`keep_behavior_flags_fixed` and
    :func:`keep_parsed_jinja`. Idempotent."""
    keep_compiled_templates()
    keep_behavior_flags_fixed()
    keep_parsed_jinja()


class DbtHarness:
    """One in-process dbt project with generated profiles; see the module docstring."""

    def __init__(
        self,
        workdir: str | Path,
        *,
        postgres_uri: Callable[[], str] | None = None,
        spark: Callable[[], Any] | None = None,
        project_dir: str | Path = INTEGRATION_TESTS,
    ) -> None:
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.project_dir = Path(project_dir)
        self.profiles_dir = self.workdir / "profiles"
        self.packages_dir = self.workdir / "dbt_packages"
        self.target_path = self.workdir / "target"
        self.log_path = self.workdir / "logs"
        self.profiles_dir.mkdir(exist_ok=True)
        self._providers: dict[str, Callable[[], Any] | None] = {
            "postgres": postgres_uri,
            "spark": spark,
        }
        self._outputs: dict[str, dict[str, Any]] = {}
        self._manifests: dict[str, Any] = {}
        self._deps_done = False
        self._token = uuid.uuid4().hex[:8]
        speed_up_in_process_dbt()

    # -- public API -------------------------------------------------------------------

    def render(self, jinja_sql: str, target: str) -> str:
        """Compile one snippet for ``target`` and return the SQL (stripped)."""
        return self.render_many([jinja_sql], target)[0]

    def render_many(self, jinja_sqls: Sequence[str], target: str) -> list[str]:
        """Compile many snippets with one dbt invocation; results are in input order."""
        if not jinja_sqls:
            return []
        markers = [_MARKER.format(token=self._token, index=i) for i in range(len(jinja_sqls))]
        inline = "\n".join(f"{m}\n{sql}" for m, sql in zip(markers, jinja_sqls, strict=True))
        result = self.invoke(["compile", "--inline", inline, "--no-populate-cache"], target)
        compiled: str = result.result.results[0].node.compiled_code
        pieces: list[str] = []
        rest = compiled
        for i, marker in enumerate(markers):
            head, sep, rest = rest.partition(marker)
            if not sep:
                raise DbtError(f"marker {i} is missing from the compiled SQL:\n{compiled}")
            if i:
                pieces.append(head.strip())
        pieces.append(rest.strip())
        return pieces

    def run_operation(
        self,
        macro: str,
        args: Mapping[str, Any] | None = None,
        target: str | None = None,
    ) -> list[str]:
        """Run ``dbt run-operation macro --args ...``; return what the macro logged.

        ``target`` is required (positionally or by keyword).
        """
        if target is None:
            raise TypeError(f"run_operation({macro!r}) needs a target: one of {TARGETS}")
        argv = ["run-operation", macro]
        if args:
            argv += ["--args", yaml.safe_dump(dict(args), default_flow_style=True)]
        logged: list[str] = []
        self.invoke(argv, target, on_log=logged.append)
        return logged

    def invoke(
        self,
        args: Sequence[str],
        target: str,
        *,
        on_log: Callable[[str], None] | None = None,
        on_warning: Callable[[str], None] | None = None,
    ) -> Any:
        """Run a dbt command in-process for ``target``; raise :class:`DbtError` on failure.

        ``on_warning(message)`` receives every warning dbt fires (deprecations included).
        """
        from dbt.cli.main import dbtRunner

        self._prepare(target)
        problems: list[str] = []

        def callback(msg: Any) -> None:
            name = msg.info.name
            if name in ("JinjaLogInfo", "JinjaLogDebug", "JinjaLogWarning"):
                if on_log is not None:
                    on_log(msg.data.msg)
            elif msg.info.level in ("warn", "error"):
                problems.append(msg.info.msg)
                if on_warning is not None and msg.info.level == "warn":
                    on_warning(msg.info.msg)

        runner = dbtRunner(manifest=self._manifests.get(target), callbacks=[callback])
        with self._environment():
            result = runner.invoke([*args, *self._common_args(target)])
        if not result.success:
            self._forget_inline_nodes(target)
            raise DbtError(_failure_text(result, problems))
        return result

    def reparse(self, target: str) -> None:
        """Parse the project again at the next invocation for ``target`` (after a test
        rewrote one of its files; the parsed manifest is otherwise reused)."""
        self._manifests.pop(target, None)

    def _forget_inline_nodes(self, target: str) -> None:
        # `compile --inline` adds an `inline_query` node to the (cached) manifest and
        # removes it in after_run, which dbt skips when the compile raises while
        # executing; the next inline compile would then fail with "two sql_operations".
        manifest = self._manifests.get(target)
        if manifest is not None:
            for unique_id in [k for k, n in manifest.nodes.items() if n.name == "inline_query"]:
                manifest.nodes.pop(unique_id)

    # -- internals --------------------------------------------------------------------

    def _common_args(self, target: str) -> list[str]:
        return [
            "--project-dir", str(self.project_dir),
            "--profiles-dir", str(self.profiles_dir),
            "--target", target,
            "--log-path", str(self.log_path),
            "--log-level", "none",
            "--log-level-file", "none",
            "--no-write-json",
            "--no-version-check",
        ]  # fmt: skip

    @contextlib.contextmanager
    def _environment(self) -> Iterator[None]:
        # Every harness (and so every concurrent test run) gets its own package install
        # directory (integration_tests/dbt_project.yml reads CHANGEFEED_DBT_PACKAGES_DIR)
        # and target directory. DBT_TARGET_PATH rather than --target-path because
        # `dbt deps` does not accept that option.
        values = {
            "CHANGEFEED_DBT_PACKAGES_DIR": str(self.packages_dir),
            "DBT_TARGET_PATH": str(self.target_path),
        }
        previous = {key: os.environ.get(key) for key in values}
        os.environ.update(values)
        try:
            yield
        finally:
            for key, value in previous.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value

    def _prepare(self, target: str) -> None:
        if target not in TARGETS:
            raise ValueError(f"unknown target {target!r}; the harness has {', '.join(TARGETS)}")
        if target not in self._outputs:
            self._outputs[target] = self._output(target)
            self._write_profiles()
        if not self._deps_done:
            self._deps_done = True
            with deps_lock(self.project_dir):
                self._run_plain(["deps"], target)
        if target not in self._manifests:
            self._manifests[target] = self._run_plain(["parse"], target).result

    def _run_plain(self, args: list[str], target: str) -> Any:
        from dbt.cli.main import dbtRunner

        with self._environment():
            result = dbtRunner().invoke([*args, *self._common_args(target)])
        if not result.success:
            raise DbtError(_failure_text(result, []))
        return result

    def _output(self, target: str) -> dict[str, Any]:
        provider = self._providers[target]
        if provider is None:
            raise DbtError(f"this harness has no {target} server (pass {target}=... to it)")
        if target == "postgres":
            return postgres_output(str(provider()))
        provider()  # start the session first: dbt-spark's getOrCreate() must find it
        return {"type": "spark", "method": "session", "host": "localhost", "schema": SCHEMA,
                "threads": 1}  # fmt: skip

    def _write_profiles(self) -> None:
        profile = {PROFILE_NAME: {"target": next(iter(self._outputs)), "outputs": self._outputs}}
        (self.profiles_dir / "profiles.yml").write_text(yaml.safe_dump(profile))


@contextlib.contextmanager
def deps_lock(project_dir: str | Path) -> Iterator[None]:
    """Held while ``dbt deps`` runs on ``project_dir``, across processes.

    ``dbt deps`` writes ``package-lock.yml`` into the project when it is missing (it is not
    committed for integration_tests/), so a second ``deps`` on the same project at the same
    moment (another pytest-xdist worker, a kill-scenario driver) could read it half written.
    """
    import fcntl

    name = hashlib.sha1(str(Path(project_dir).resolve()).encode()).hexdigest()[:12]
    lock_file = Path(tempfile.gettempdir()) / f"changefeed-dbt-deps-{name}.lock"
    with lock_file.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # released when the file is closed
        yield


def postgres_output(uri: str) -> dict[str, Any]:
    """A dbt-postgres profile output for a libpq URI such as pgserver's.

    pgserver listens on a Unix socket only; its URI names the socket directory in the
    ``host`` query parameter, which dbt-postgres (psycopg2) accepts as ``host``.

    >>> postgres_output("postgresql://postgres:@/postgres?host=/tmp/pg")["host"]
    '/tmp/pg'
    """
    parts = urllib.parse.urlsplit(uri)
    query = urllib.parse.parse_qs(parts.query)
    host = query.get("host", [parts.hostname or "localhost"])[0]
    return {
        "type": "postgres",
        "host": host,
        "port": parts.port or 5432,
        "user": urllib.parse.unquote(parts.username or "postgres"),
        "password": urllib.parse.unquote(parts.password or ""),
        "dbname": parts.path.lstrip("/") or "postgres",
        "schema": SCHEMA,
        "threads": 1,
    }


def _failure_text(result: Any, problems: list[str]) -> str:
    if result.exception is not None:
        text = str(result.exception)
    else:
        errors = [
            str(getattr(r, "message", r))
            for r in getattr(result.result, "results", []) or []
            if getattr(r, "status", None) in ("error", "fail")
        ]
        text = "\n".join(errors) or "dbt failed without an exception"
    if problems:
        text += "\n" + "\n".join(problems)
    return text
