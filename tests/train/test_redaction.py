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


@pytest.mark.parametrize("text", ["mxnet==1.9.1", "/data/cifar-10?token=local-path", "user:pass@host is no URL",
                                  "", "numpy<1.24; python_version < '3.12'"])
def test_text_without_a_url_comes_back_as_it_is(text):
    assert redact(text) == text


def test_a_path_object_is_written_as_text():
    from pathlib import Path
    assert redact(Path("/data/x")) == "/data/x"
