"""Build hook of the cmestream package: generates the gRPC stubs into the package.

The metadata is in pyproject.toml. Here, build_py additionally runs the system protoc with
grpc_python_plugin on proto/cmestream/v1/cmestream.proto (found at ../../proto, or in the
directory named by $CMESTREAM_PROTO_DIR) and writes cmestream/v1/{cmestream_pb2.py,
cmestream_pb2.pyi, cmestream_pb2_grpc.py, __init__.py} into the build tree, so the installed
package carries its stubs. (Debian's python3-grpc-tools is too old for proto3 `optional`.)
"""
import os
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO = os.path.join("cmestream", "v1", "cmestream.proto")


def proto_root() -> str:
    root = os.environ.get("CMESTREAM_PROTO_DIR") or os.path.join(HERE, "..", "..", "proto")
    if not os.path.isfile(os.path.join(root, PROTO)):
        raise SystemExit(f"cmestream: cannot find {PROTO} under {os.path.abspath(root)}; build from "
                         "the cmestream source tree or set CMESTREAM_PROTO_DIR to its proto/ directory")
    return root


def tool(name: str, package: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise SystemExit(f"cmestream: '{name}' not found on PATH (Debian package {package})")
    return path


def generate_stubs(out_dir: str) -> None:
    """protoc --python_out --pyi_out --grpc_out into out_dir (the package root's parent)."""
    protoc = tool("protoc", "protobuf-compiler")
    plugin = tool("grpc_python_plugin", "protobuf-compiler-grpc")
    root = proto_root()
    os.makedirs(out_dir, exist_ok=True)
    subprocess.run([protoc, "-I", root, f"--python_out={out_dir}", f"--pyi_out={out_dir}",
                    f"--grpc_out={out_dir}", f"--plugin=protoc-gen-grpc={plugin}",
                    os.path.join(root, PROTO)], check=True)
    init = os.path.join(out_dir, "cmestream", "v1", "__init__.py")
    with open(init, "w") as f:
        f.write('"""Generated gRPC stubs of cmestream.v1 (proto/cmestream/v1/cmestream.proto)."""\n')


class BuildPyWithStubs(build_py):
    def run(self):
        super().run()
        generate_stubs(self.build_lib)


setup(cmdclass={"build_py": BuildPyWithStubs})
