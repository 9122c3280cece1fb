"""Files at URLs (`s3://`, `gs://`, `https://`, ...), read by byte ranges through fsspec.

`_files` holds `RemoteFile` (size and version asked once, byte ranges merged,
fetched at once, retried within bounds, bodies checked), `read_many` and
`local_copy`, which fetches a small file whole (a STAR or `.cs` table) for
a parser that reads paths; `_http` how a URL is reached: fsspec's options
bounded in time (`client_options`), ranges asked over HTTP and checked, and
the redirect check. Messages and reprs name a URL as `redact` gives it: no
password, signature, credential or token it may hold. The storage
(`vitrio._storage`) opens files through this package; nothing else does.
"""

from ._files import RemoteFile, local_copy, merge_ranges, missing_backend, read_many, transient
from ._http import ServerError, client_options, is_http

__all__ = [
    "RemoteFile",
    "ServerError",
    "client_options",
    "is_http",
    "local_copy",
    "merge_ranges",
    "missing_backend",
    "read_many",
    "transient",
]
