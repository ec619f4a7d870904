"""A real S3-compatible server for the object-store tests: moto's server (``moto[s3]`` with
Flask, from PyPI, dev dependencies), started as a process of its own on 127.0.0.1 and
stopped after. Spark reaches it through Hadoop's S3A connector (``make jars``), the test
through boto3; both speak S3's HTTP API to it, path-style, as to any S3-compatible
store.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.real_parts import unavailable
from tests.support.spark_cluster import free_port, stop_group, wait_listening

HOST = "127.0.0.1"
#: moto accepts any keys; these are what every process of the test is given.
ACCESS_KEY = "changefeed-test"
SECRET_KEY = "changefeed-test-secret"
REGION = "us-east-1"


@dataclass(frozen=True)
class S3Server:
    """A running server: its endpoint (``http://127.0.0.1:PORT``) and one bucket on it."""

    endpoint: str
    bucket: str

    def client(self) -> Any:
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, region_name=REGION,
                            aws_access_key_id=ACCESS_KEY,
                            aws_secret_access_key=SECRET_KEY)  # fmt: skip

    def keys(self, prefix: str = "") -> list[str]:
        """Every object key of the bucket under ``prefix``."""
        pages = self.client().get_paginator("list_objects_v2")
        return [item["Key"] for page in pages.paginate(Bucket=self.bucket, Prefix=prefix)
                for item in page.get("Contents", [])]  # fmt: skip


#: What docs/deploying.md's block ``object-store-catalog`` names, replaced with a test's.
PAGE_BUCKET, PAGE_ENDPOINT = "my-bucket", "http://127.0.0.1:9000"


def on_server(block: str, server: S3Server) -> str:
    """The page's ``block``, on ``server`` and its bucket."""
    assert PAGE_BUCKET in block and PAGE_ENDPOINT in block, block
    return block.replace(f"s3a://{PAGE_BUCKET}/", f"s3a://{server.bucket}/").replace(
        PAGE_ENDPOINT, server.endpoint
    )


def credentials_env() -> dict[str, str]:
    """The keys in the environment variables that S3A's default credential chain reads."""
    return {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY}


@contextmanager
def s3_server(workdir: Path, bucket: str) -> Iterator[S3Server]:
    """moto's server with an empty ``bucket``, until the block ends; its log in
    ``workdir``. Unavailable (a skip, or a failure under CI=true) without moto or boto3."""
    try:
        import boto3  # noqa: F401
        import moto.server  # noqa: F401
    except ImportError as exc:
        unavailable("moto's S3 server", f"{exc.name} is not installed (make venv installs "
                    "the dev extra's moto[s3] and flask)")  # fmt: skip
    port = free_port()
    log = workdir / "moto.log"
    with log.open("wb") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", HOST, "-p", str(port)],
            stdout=out, stderr=subprocess.STDOUT, cwd=workdir, start_new_session=True,
        )  # fmt: skip
    try:
        wait_listening("moto's S3 server", server, port, log)
        found = S3Server(f"http://{HOST}:{port}", bucket)
        found.client().create_bucket(Bucket=bucket)
        yield found
    finally:
        stop_group(server)
