#!/usr/bin/env python3
"""Packs prebuilt Memex binaries into a Python wheel, so that `pipx install` or
`uv tool install` installs Memex without a Rust toolchain.

The wheel holds no Python code: the binaries sit in `<name>-<version>.data/scripts/`, which pip
installs into the environment's `bin/` (`Scripts\\` on Windows) with the executable bit set.
Standard library only; the release workflow runs it on every target, the tests on the binary
the test build made.

    pack-wheel.py --binary target/release/memex --binary target/release/memex-inject \\
                  --version 0.1.0 --platform manylinux_2_35_x86_64 --out dist/
"""

import argparse
import base64
import hashlib
import os
import re
import sys
import sysconfig
import zipfile

SUMMARY = "A lossless, searchable memory of AI coding-agent conversations (the memex binary)"


def record_line(path, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path},sha256={digest},{len(data)}"


def host_platform():
    """This machine's wheel platform tag (linux_x86_64, macosx_11_0_arm64, win_amd64)."""
    return re.sub(r"[-.]", "_", sysconfig.get_platform())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--binary", action="append", required=True, help="a binary to carry")
    ap.add_argument("--version", required=True, help="the package version, e.g. 0.1.0")
    ap.add_argument("--platform", default=None, help="wheel platform tag (default: this machine's)")
    ap.add_argument("--name", default="memex", help="distribution name (default: memex)")
    ap.add_argument("--out", required=True, help="folder to write the wheel into")
    ap.add_argument("--fast", action="store_true", help="compress less (for tests)")
    a = ap.parse_args()

    if not re.fullmatch(r"[0-9]+(\.[0-9]+)*([a-z]+[0-9]*)?", a.version):
        sys.exit(f"pack-wheel: `{a.version}` is not a version like 0.1.0")
    platform = a.platform or host_platform()
    if not re.fullmatch(r"[a-z0-9_]+", platform):
        sys.exit(f"pack-wheel: `{platform}` is not a wheel platform tag")
    dist = re.sub(r"[-_.]+", "_", a.name).lower()
    tag = f"py3-none-{platform}"
    wheel = os.path.join(a.out, f"{dist}-{a.version}-{tag}.whl")
    data_dir = f"{dist}-{a.version}.data/scripts"
    info_dir = f"{dist}-{a.version}.dist-info"

    metadata = (
        "Metadata-Version: 2.1\n"
        f"Name: {a.name}\n"
        f"Version: {a.version}\n"
        f"Summary: {SUMMARY}\n"
        "License: MIT OR Apache-2.0\n"
        "Requires-Python: >=3.8\n"
    ).encode()
    wheel_file = (
        "Wheel-Version: 1.0\n"
        "Generator: memex pack-wheel.py\n"
        "Root-Is-Purelib: false\n"
        f"Tag: {tag}\n"
    ).encode()

    os.makedirs(a.out, exist_ok=True)
    level = 1 if a.fast else 9
    records = []
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED, compresslevel=level) as z:
        for b in a.binary:
            if not os.path.isfile(b):
                sys.exit(f"pack-wheel: no binary at {b}")
            with open(b, "rb") as f:
                data = f.read()
            arc = f"{data_dir}/{os.path.basename(b)}"
            info = zipfile.ZipInfo(arc, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = (0o100755 & 0xFFFF) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data, compresslevel=level)
            records.append(record_line(arc, data))
        for name, data in (("METADATA", metadata), ("WHEEL", wheel_file)):
            arc = f"{info_dir}/{name}"
            z.writestr(zipfile.ZipInfo(arc, date_time=(2020, 1, 1, 0, 0, 0)), data)
            records.append(record_line(arc, data))
        records.append(f"{info_dir}/RECORD,,")
        z.writestr(
            zipfile.ZipInfo(f"{info_dir}/RECORD", date_time=(2020, 1, 1, 0, 0, 0)),
            ("\n".join(records) + "\n").encode(),
        )
    print(wheel)


if __name__ == "__main__":
    main()
