"""Storage locations as URIs (twophase.spark.storage): what is accepted, what it becomes, and the
one-line refusals that name the value and the setting."""

from __future__ import annotations

import pytest

from twophase.spark.storage import StorageURIError, join_uri, local_path, storage_uri

S = "ORDERS_DATA"


@pytest.mark.parametrize("value, uri", [
    ("hdfs://namenode:8020/data/orders", "hdfs://namenode:8020/data/orders"),
    ("hdfs://prod-ns/data/orders/", "hdfs://prod-ns/data/orders"),
    ("hdfs:///data/orders", "hdfs:///data/orders"),            # the default name node
    ("HDFS://nn/x", "hdfs://nn/x"),
    ("s3a://my-bucket/orders", "s3a://my-bucket/orders"),
    ("s3a://my-bucket", "s3a://my-bucket/"),
    ("s3a://my.bucket/a//b/./c/", "s3a://my.bucket/a/b/c"),
    ("file:///srv/orders", "file:///srv/orders"),
    ("file:/srv/orders", "file:///srv/orders"),                # Hadoop's own form of a local path
    ("file://localhost/srv/orders", "file:///srv/orders"),
    ("/srv/orders", "file:///srv/orders"),                     # a plain local path
    ("/srv/my orders/date=2026-11-20", "file:///srv/my orders/date=2026-11-20"),
    ("/", "file:///"),
])
def test_accepted_values_and_what_they_become(value, uri):
    assert storage_uri(value, S) == uri
    assert storage_uri(uri, S) == uri, "a normalised URI stays as it is"


@pytest.mark.parametrize("value, why", [
    ("", "ORDERS_DATA is empty: give file://, hdfs:// or s3a://, or an absolute local path"),
    ("data/orders", "it is a relative path"),
    ("./orders", "it is a relative path"),
    ("~/orders", "it is a relative path"),
    (" /srv/orders", "leading or trailing whitespace"),
    ("ftp://host/orders", "its scheme 'ftp' is not one this pipeline reads and writes (the schemes known here "
                          "are file://, hdfs://, s3a://)"),
    ("s3://bucket/orders", "its scheme 's3' is not one this pipeline reads and writes (Hadoop's connector for it "
                           "is s3a://)"),
    ("gs://bucket/orders", "its scheme 'gs' is not one"),
    ("hdfs:/namenode/orders", "it has no '//' after 'hdfs:' (write hdfs://namenode:8020/path; a path joined with "
                              "pathlib loses one '/')"),
    ("s3a:/bucket/orders", "it has no '//' after 's3a:'"),
    ("s3a:///orders", "an s3a URI names its bucket: s3a://bucket/path"),
    ("s3a://AKIAEXAMPLE:wJalrXUtnFEMI@bucket/orders", "it holds credentials before '@'"),
    ("hdfs://name node/x", "is not a name node host[:port] or nameservice"),
    ("file://otherhost/srv/orders", "a file:// URI names no host (file:///path), not 'otherhost'"),
    ("file:srv/orders", "a file: URI needs an absolute path"),
    ("/srv/orders/../secrets", "it holds a '..' segment"),
    ("/srv/orders/date=*", "one of ? * [ ] { } # \\ (Spark reads those as patterns)"),
    ("hdfs://nn/orders?x=1", "one of ? * [ ] { } #"),
    ("/srv/or\nders", "a control character"),
])
def test_refused_values_say_which_setting_and_why(value, why):
    with pytest.raises(StorageURIError) as refused:
        storage_uri(value, S)
    message = str(refused.value)
    assert why in message and "\n" not in message
    assert message.startswith(S + " "), "the message names the setting first"
    if value.strip():
        assert "not a storage location" in message


def test_credentials_never_reach_the_message():
    with pytest.raises(StorageURIError) as refused:
        storage_uri("s3a://AKIAEXAMPLE:wJalrXUtnFEMI@bucket/orders", S)
    assert "wJalrXUtnFEMI" not in str(refused.value) and "AKIAEXAMPLE" not in str(refused.value)
    assert "'s3a://***@bucket/orders'" in str(refused.value)


def test_not_a_string_is_refused():
    with pytest.raises(StorageURIError, match=r"^the load's input 'path' is NoneType: give file://"):
        storage_uri(None, "the load's input 'path'")


@pytest.mark.parametrize("base", ["hdfs://nn:8020/data", "s3a://bucket/data", "file:///srv/data"])
def test_joins_keep_the_scheme_and_authority(base):
    assert join_uri(base, "landing", "date=2026-11-20") == base + "/landing/date=2026-11-20"
    assert join_uri(base + "/", "rejects") == base + "/rejects"


def test_joins_at_the_root():
    assert join_uri(storage_uri("/", S), "x") == "file:///x"
    assert join_uri(storage_uri("s3a://bucket", S), "x") == "s3a://bucket/x"
    assert join_uri(storage_uri("hdfs:///", S), "x") == "hdfs:///x"


def test_a_load_id_is_one_segment():
    lid = "orders_daily_totals.manual__2026-11-23T02-51-50.701276-00-00.ae12d71747"
    assert join_uri("s3a://b/rejects", f"load={lid}") == f"s3a://b/rejects/load={lid}"


@pytest.mark.parametrize("segment", ["", ".", "..", "a/b", "date=*", "x?y", "{a,b}", "a\nb"])
def test_bad_segments_are_refused(segment):
    with pytest.raises(StorageURIError, match=r"^cannot put .* under 'hdfs://nn/data': "):
        join_uri("hdfs://nn/data", segment)


def test_local_path_of_file_uris_only():
    assert local_path("file:///srv/orders/landing", "--landing") == "/srv/orders/landing"
    assert local_path("/srv/orders/landing", "--landing") == "/srv/orders/landing"
    with pytest.raises(StorageURIError, match=r"^--landing 'hdfs://nn/landing' is not on the "
                                              r"local disk \(file://\): this tool writes local files"):
        local_path("hdfs://nn/landing", "--landing")


def test_the_refusal_is_a_spec_error():
    """Begin turns a SpecError from describe_input into 'the load is described wrongly: ...'."""
    from twophase.spec import SpecError

    assert issubclass(StorageURIError, SpecError)
