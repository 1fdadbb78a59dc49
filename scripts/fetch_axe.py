"""Fetch axe-core's browser script (axe.min.js) from the npm registry for the report's
accessibility test, checked against the tarball's integrity as npm records it; no Node needed.
    python scripts/fetch_axe.py .venv/axe/axe.min.js"""
import base64
import hashlib
import io
import sys
import tarfile
import urllib.request
from pathlib import Path

VERSION = "4.10.3"
TARBALL = f"https://registry.npmjs.org/axe-core/-/axe-core-{VERSION}.tgz"
# `npm view axe-core@4.10.3 dist.integrity`
INTEGRITY = "sha512-Xm7bpRXnDSX2YE2YFfBk2FnF0ep6tmG7xPh8iHee8MIcrgq762Nkce856dYtJYLkuIoYZvGfTs/PbZhideTcEg=="


def main(dest: str) -> int:
    with urllib.request.urlopen(TARBALL, timeout=120) as answer:
        body = answer.read()
    digest = "sha512-" + base64.b64encode(hashlib.sha512(body).digest()).decode()
    if digest != INTEGRITY:
        print(f"axe-core {VERSION}: the tarball's digest {digest} is not npm's {INTEGRITY}", file=sys.stderr)
        return 1
    with tarfile.open(fileobj=io.BytesIO(body), mode="r:gz") as tar:
        script = tar.extractfile("package/axe.min.js")
        if script is None:
            print(f"axe-core {VERSION}: the tarball has no package/axe.min.js", file=sys.stderr)
            return 1
        data = script.read()
    path = Path(dest)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
