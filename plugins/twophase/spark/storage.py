"""Storage locations as URIs: what a load reads and what its job keeps (`file://`,
`hdfs://`, `s3a://`), checked and joined as strings.

pathlib is not for these: `Path("hdfs://nn/x")` is `hdfs:/nn/x`, a path on the default
file system rather than on the name node `nn`. The URIs are Hadoop path strings, as
Spark and Hadoop's FileSystem take them (no percent-encoding).

- storage_uri(value, setting): a URI, or an absolute local path made a file:// URI;
  anything else raises StorageURIError naming the value and the setting it came from.
- join_uri(uri, *segments): the URI of a location under another one.
- local_path(uri, setting): the local path of a file:// URI (for tools that write files
  themselves, such as the sample data maker).
- filesystem(uri): pyarrow's file system of a URI and the path in it, for what reads and
  writes files without a JVM (a landing folder's listing, Iceberg's staged files).
"""

from __future__ import annotations

import posixpath
import re

from ..errors import SpecError

SCHEMES = ("file", "hdfs", "s3a")
KNOWN = "file://, hdfs:// or s3a://, or an absolute local path"
# Other names people write for the same stores, and what to write instead.
_INSTEAD = {"s3": "s3a", "s3n": "s3a", "hdfs3": "hdfs"}
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):(.*)$", re.S)
_HOST = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?(:[0-9]{1,5})?$")  # name node, host:port, nameservice
_BUCKET = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
# Spark's readers take ? * [ ] { } as glob patterns and Hadoop's Path drops a '#...' tail.
_SPECIAL = re.compile(r"[\x00-\x1f\x7f?*\[\]{}#\\]")


class StorageURIError(SpecError):
    """A storage location is not a URI this project reads and writes; the message names
    the value and the setting it came from."""


def storage_uri(value, setting: str) -> str:
    """`value` as a normalised storage URI: scheme file, hdfs or s3a, an absolute path, no
    trailing '/'. A plain absolute path is a local one: file:///that/path."""
    if not isinstance(value, str) or not value.strip():
        raise StorageURIError(f"{setting} is {'empty' if isinstance(value, str) else type(value).__name__}: "
                              f"give {KNOWN}")
    if value != value.strip():
        raise _bad(value, setting, "it has leading or trailing whitespace")
    match = _SCHEME.match(value)
    if match is None:
        if not value.startswith("/"):
            raise _bad(value, setting, "it is a relative path, which each Spark process would resolve against its "
                                       f"own working folder; give {KNOWN}")
        return "file://" + _path(value, value, setting)
    scheme, rest = match.group(1).lower(), match.group(2)
    if scheme not in SCHEMES:
        hint = (f"Hadoop's connector for it is {_INSTEAD[scheme]}://" if scheme in _INSTEAD
                else f"the schemes known here are {', '.join(s + '://' for s in SCHEMES)}")
        raise _bad(value, setting, f"its scheme {scheme!r} is not one this pipeline reads and writes ({hint})")
    if scheme == "file":
        if rest.startswith("//"):
            host, path = _split_authority(rest[2:])
            if host not in ("", "localhost"):
                raise _bad(value, setting, f"a file:// URI names no host (file:///path), not {host!r}")
        else:
            path = rest
        if not path.startswith("/"):
            raise _bad(value, setting, "a file: URI needs an absolute path (file:///path)")
        return "file://" + _path(path, value, setting)
    if not rest.startswith("//"):
        raise _bad(value, setting, f"it has no '//' after '{scheme}:' (write {_example(scheme)}; a path joined "
                                   "with pathlib loses one '/')")
    authority, path = _split_authority(rest[2:])
    if "@" in authority:
        raise _bad(value, setting, "it holds credentials before '@': give them to Hadoop's settings or the "
                                   "environment, never in a URI")
    if scheme == "s3a" and not _BUCKET.match(authority):
        raise _bad(value, setting, f"an s3a URI names its bucket: {_example(scheme)}")
    if scheme == "hdfs" and authority and not _HOST.match(authority):
        raise _bad(value, setting, f"{authority!r} is not a name node host[:port] or nameservice "
                                   f"({_example(scheme)}, or hdfs:///path for the default one)")
    return f"{scheme}://{authority}{_path(path or '/', value, setting)}"


def join_uri(uri: str, *segments: str) -> str:
    """The location `segments` below the storage URI `uri` (one folder or file name each,
    such as 'date=2026-11-20'); a string join, never pathlib."""
    for segment in segments:
        if not isinstance(segment, str) or not segment or "/" in segment or segment in (".", ".."):
            raise StorageURIError(f"cannot put {segment!r} under {_shown(uri)}: each part is one folder or file "
                                  "name, not empty, '.', '..' or holding '/'")
        if _SPECIAL.search(segment):
            raise StorageURIError(f"cannot put {segment!r} under {_shown(uri)}: it holds a control character or "
                                  "one of ? * [ ] { } # \\ (Spark reads those as patterns)")
    return "/".join([uri.rstrip("/") if not uri.endswith(":///") else uri[:-1], *segments])


def local_path(uri: str, setting: str) -> str:
    """The local path a file:// URI (or a plain absolute path) names; refuses other schemes."""
    normal = storage_uri(uri, setting)
    if not normal.startswith("file://"):
        raise StorageURIError(f"{setting} {_shown(uri)} is not on the local disk (file://): this tool writes local "
                              "files; copy them to the store afterwards (hdfs dfs -put, aws s3 cp)")
    return normal[len("file://"):]


def _split_authority(rest: str) -> tuple[str, str]:
    slash = rest.find("/")
    return (rest, "") if slash < 0 else (rest[:slash], rest[slash:])


def _path(path: str, value: str, setting: str) -> str:
    if _SPECIAL.search(path):
        raise _bad(value, setting, "it holds a control character or one of ? * [ ] { } # \\ (Spark reads those "
                                   "as patterns)")
    if any(part == ".." for part in path.split("/")):
        raise _bad(value, setting, "it holds a '..' segment: give the location itself")
    normal = posixpath.normpath("/" + path.lstrip("/"))  # '//a/./b/' -> '/a/b'
    return normal if normal != "/" else "/"


def _example(scheme: str) -> str:
    return {"hdfs": "hdfs://namenode:8020/path", "s3a": "s3a://bucket/path"}.get(scheme, "file:///path")


def _shown(value: str) -> str:
    """The value for a message, without credentials a user put in it by mistake."""
    return repr(re.sub(r"^([A-Za-z][A-Za-z0-9+.-]*://)[^/@]*@", r"\1***@", value))


def _bad(value: str, setting: str, why: str) -> StorageURIError:
    return StorageURIError(f"{setting} {_shown(value)} is not a storage location: {why}")


def filesystem(uri: str):
    """pyarrow's file system of a URI (file://, s3://, hdfs://...) and the path in it. A
    plain absolute path is a local one; s3a:// (Hadoop's name) is pyarrow's s3://."""
    import pyarrow.fs as pafs

    if uri.startswith("/"):
        uri = f"file://{uri}"
    if uri.startswith("s3a://"):
        uri = "s3://" + uri[len("s3a://"):]
    return pafs.FileSystem.from_uri(uri)
