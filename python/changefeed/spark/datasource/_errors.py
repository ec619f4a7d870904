"""The one error type of the feed data source and the landing."""

from __future__ import annotations

import re


class ChangefeedSourceError(ValueError):
    """A feed cannot be read as asked; the message names the cause and the fix.

    Raised for a missing or bad option, an unknown feed, a bad ULID or offset, and an
    unreachable database. Inside Spark it reaches the user wrapped in Spark's own
    exception, with this message in its text.
    """


_PASSWORD_IN_URI = re.compile(r"(?P<head>[a-z][a-z0-9+.-]*://[^:/@?#]*:)[^@/?#]*@", re.I)
_PASSWORD_IN_QUERY = re.compile(r"(?P<head>[?&]password=)[^&#]*", re.I)


def redact(uri: str) -> str:
    """A connection URI with its password replaced by ``***`` (for error messages).

    >>> redact("postgresql://app:s3cret@db:5432/shop?password=x&sslmode=require")
    'postgresql://app:***@db:5432/shop?password=***&sslmode=require'
    """
    text = _PASSWORD_IN_URI.sub(r"\g<head>***@", uri)
    return _PASSWORD_IN_QUERY.sub(r"\g<head>***", text)
