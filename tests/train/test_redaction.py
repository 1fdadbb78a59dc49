"""mxbench_train.redaction: no URL's credentials in what is written down, wherever the URL stands."""
import pytest

from mxbench_train.redaction import redact, redact_url


def test_a_whole_url_loses_its_user_password_and_secret_query_values():
    assert redact("https://bob:s3cret@wheels.example/mxnet.whl?token=t0k&v=2#sha256=ab") == \
        "https://wheels.example/mxnet.whl?token=REDACTED&v=2#sha256=ab"
    assert redact_url("http://bob@host/x") == "http://host/x"


@pytest.mark.parametrize("text, expected", [
    ("mxnet @ https://bob:s3cret@wheels.example/mxnet-1.9.1-py3-none-any.whl",
     "mxnet @ https://wheels.example/mxnet-1.9.1-py3-none-any.whl"),
    ("cannot download from 'https://bob:s3cret@data.example/c.tar.gz': 403; retried https://x:s3cret@mirror/c",
     "cannot download from 'https://data.example/c.tar.gz': 403; retried https://mirror/c"),
    ("ERROR: Could not install from <s3://key:s3cret@bucket/w.whl> (git+https://u:s3cret@git.example/r.git)",
     "ERROR: Could not install from <s3://bucket/w.whl> (git+https://git.example/r.git)"),
    ("a password with an @: ftp://bob:p@ss-s3cret@files.example/x and more", "a password with an @: "
     "ftp://files.example/x and more"),
    ("broken host http://bob:s3cret@[::1/x", "broken host http://[::1/x"),
])
def test_every_url_in_a_longer_text_is_redacted(text, expected):
    assert redact(text) == expected
    assert "s3cret" not in redact(text)


@pytest.mark.parametrize("text, expected", [
    # a password with what a URL should have encoded: / # " or a space
    ("https://bob:pa/ss@host.example/c.tgz failed", "https://host.example/c.tgz failed"),
    ("https://bob:pa#ss@host.example/c.tgz", "https://host.example/c.tgz"),
    ('from "https://bob:pa"ss@host.example/c.tgz"', 'from "https://host.example/c.tgz"'),
    ("'https://bob:my pass phrase@host.example/c.tgz': 403", "'https://host.example/c.tgz': 403"),
    ("https://bob:p/a#s s\"@host.example:8443/c.tgz", "https://host.example:8443/c.tgz"),
    # query keys for a password, short ones too
    ("https://h.example/c.tgz?pw=s3cret&pass=s3cret&pwd=s3cret&passphrase=s3cret&v=2",
     "https://h.example/c.tgz?pw=REDACTED&pass=REDACTED&pwd=REDACTED&passphrase=REDACTED&v=2"),
    # no scheme: user:password@host wherever it stands
    ("ssh bob:s3cret@gpu-1.example failed", "ssh gpu-1.example failed"),
    ("connect to bob:s3cret@db.example:5432/results", "connect to db.example:5432/results"),
    ("(bob:s3:cret@10.0.0.7)", "(10.0.0.7)"),
])
def test_a_password_a_url_should_have_encoded_or_a_url_without_scheme_is_redacted(text, expected):
    redacted = redact(text)
    assert redacted == expected
    for secret in ("s3cret", "s3:cret", "pa/ss", "pa#ss", 'pa"ss', "pass phrase", 'p/a#s s"'):
        assert secret not in redacted


@pytest.mark.parametrize("text", [
    "mxnet==1.9.1", "/data/cifar-10?token=local-path", "user@host has no password", "",
    "numpy<1.24; python_version < '3.12'", "at 10:30 the run failed", "mail ops@example.com: 3 runs failed",
    "https://host.example:8443/c.tgz failed; mail ops@example.com",  # a port, then an address
    "https://host.example:8443 and ops@example.com",
    "image mxbench-train:1.9.1@sha256:" + "ab" * 32,  # an image by digest
    "git@github.com:org/repo.git", "https://files.example/mxnet@1.9.1.whl", "mxnet @ https://w.example/m.whl",
    "Epoch[1] Batch [5]\tSpeed: 100.00 samples/sec\taccuracy=0.1", "the pass rate: 0.95",
    "https://h.example/c.tgz?compass=north&bypass_cache=1",
])
def test_text_without_credentials_comes_back_as_it_is(text):
    assert redact(text) == text


def test_a_path_object_is_written_as_text():
    from pathlib import Path
    assert redact(Path("/data/x")) == "/data/x"
