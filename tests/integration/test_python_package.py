"""The Python package as a user installs it: a fresh venv (Debian's python3 with its system
grpcio/protobuf/numpy), `pip install --no-deps --no-build-isolation` of a copy of
client/python (so the source tree is not written), then python_package_check.py run by the
venv's interpreter from an empty directory with no PYTHONPATH, against a real cmestreamd.

Environment (ctest): CMESTREAMD (daemon binary). Needs python3-venv, python3-setuptools,
python3-wheel, protobuf-compiler, protobuf-compiler-grpc (scripts/install-deps.sh).
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
DAEMON = os.environ.get("CMESTREAMD", "cmestreamd")


class PythonPackageTest(unittest.TestCase):
    def test_venv_install_and_use_against_the_daemon(self):
        with tempfile.TemporaryDirectory(prefix="cmestream-pkg-test-") as tmp:
            src = os.path.join(tmp, "src")
            shutil.copytree(os.path.join(ROOT, "client", "python"), src,
                            ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
            venv = os.path.join(tmp, "venv")
            subprocess.run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", venv],
                           check=True)
            env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
            env["CMESTREAM_PROTO_DIR"] = os.path.join(ROOT, "proto")
            pip = subprocess.run([os.path.join(venv, "bin", "pip"), "install", "--no-deps",
                                  "--no-build-isolation", "--no-index", src],
                                 env=env, capture_output=True, text=True, timeout=600)
            self.assertEqual(pip.returncode, 0, pip.stdout + pip.stderr)
            self.assertIn("Successfully installed cmestream-", pip.stdout)
            # The package version is the CMake project version.
            with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
                cmake = f.read()
            version = re.search(r"project\(cmestream VERSION ([0-9.]+)", cmake).group(1)
            self.assertIn(f"cmestream-{version}", pip.stdout)

            work = os.path.join(tmp, "elsewhere")
            os.mkdir(work)
            env.pop("CMESTREAM_PROTO_DIR")
            env.update(CMESTREAMD=DAEMON, EXPECTED_VERSION=version)
            run = subprocess.run([os.path.join(venv, "bin", "python"),
                                  os.path.join(HERE, "python_package_check.py")],
                                 cwd=work, env=env, capture_output=True, text=True, timeout=300)
            sys.stderr.write(run.stderr[-4000:])
            self.assertEqual(run.returncode, 0, run.stdout + run.stderr[-4000:])
            self.assertIn("package check: ok", run.stdout)


if __name__ == "__main__":
    unittest.main(verbosity=2)
