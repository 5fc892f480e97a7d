"""Build of the bitrank Python package (metadata: pyproject.toml).

The package is python/bitrank; its C library is built here with CMake:

    cmake -S <repo> -B build-py/cmake -DCMAKE_BUILD_TYPE=Release -DBITRANK_TESTS=OFF \
          -DBITRANK_NATIVE=OFF
    cmake --build build-py/cmake --target bitrank_shared

and libbitrank.so is copied into the package directory bitrank/ of the wheel (in an
editable install, `pip install -e .`, into python/bitrank/ of the source tree, where
the .pth of the install points). The CUDA backend is built when nvcc is found
(/usr/local/cuda/bin is added to PATH when it exists). Switches (environment):
BITRANK_CUDA=ON|OFF|AUTO (default AUTO) and BITRANK_CMAKE_ARGS (more -D options).

The wheel holds a native library loaded with ctypes (no Python extension module),
so it is tagged py3-none-<platform>: any Python 3 on this platform.
"""
import os
import shlex
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py as _build_py
from setuptools.command.sdist import sdist as _sdist
from setuptools.dist import Distribution

try:
    from setuptools.command.bdist_wheel import bdist_wheel as _bdist_wheel
except ImportError:  # setuptools < 70.1
    try:
        from wheel.bdist_wheel import bdist_wheel as _bdist_wheel
    except ImportError:
        _bdist_wheel = None

ROOT = os.path.dirname(os.path.abspath(__file__))
LIB = "libbitrank.so"
PACKAGE = "bitrank"
# setuptools' default build directory, build/, is the CMake build of the README
BUILD_BASE = "build-py"
# what CMake needs to build the library (sdist)
SDIST_EXTRA = ["CMakeLists.txt", "include", "src", "bench"]


class BinaryDistribution(Distribution):
    """The package carries a native library: platform-specific, installed to platlib."""

    def has_ext_modules(self):
        return True


def _build_library(build_base):
    """Configures and builds the bitrank_shared target; returns the library's path."""
    cmake = shutil.which("cmake")
    if cmake is None:
        raise RuntimeError("bitrank: cmake (>= 3.24) is needed to build the C library; "
                           "scripts/install-deps installs it and the compilers on Debian")
    bdir = os.path.abspath(os.path.join(build_base, "cmake"))
    env = os.environ.copy()
    if os.path.isdir("/usr/local/cuda/bin"):
        env["PATH"] = env.get("PATH", "") + os.pathsep + "/usr/local/cuda/bin"
    configure = [cmake, "-S", ROOT, "-B", bdir, "-DCMAKE_BUILD_TYPE=Release",
                 "-DBITRANK_TESTS=OFF", "-DBITRANK_NATIVE=OFF"]
    if os.environ.get("BITRANK_CUDA"):
        configure.append("-DBITRANK_CUDA=" + os.environ["BITRANK_CUDA"])
    configure += shlex.split(os.environ.get("BITRANK_CMAKE_ARGS", ""))
    jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 1)
    build = [cmake, "--build", bdir, "--target", "bitrank_shared", "--parallel", jobs]
    for cmd in (configure, build):
        print("bitrank:", " ".join(shlex.quote(c) for c in cmd), flush=True)
        subprocess.check_call(cmd, env=env)
    lib = os.path.join(bdir, LIB)
    if not os.path.isfile(lib):
        raise RuntimeError(f"bitrank: the build did not produce {lib}")
    return lib


class build_py(_build_py):
    """build_py, then the C library into the package directory."""

    def run(self):
        super().run()
        build = self.get_finalized_command("build")
        lib = _build_library(build.build_base)
        if getattr(self, "editable_mode", False):
            dest = os.path.join(ROOT, self.get_package_dir(PACKAGE))
        else:
            dest = os.path.join(self.build_lib, PACKAGE)
        os.makedirs(dest, exist_ok=True)
        self.copy_file(lib, os.path.join(dest, LIB), preserve_mode=True)

    def get_outputs(self, *args, **kwargs):
        outputs = list(super().get_outputs(*args, **kwargs))
        if not getattr(self, "editable_mode", False):
            outputs.append(os.path.join(self.build_lib, PACKAGE, LIB))
        return outputs


class sdist(_sdist):
    """sdist with the C sources CMake builds from (there is no MANIFEST.in)."""

    def make_distribution(self):
        have = set(self.filelist.files)
        for top in SDIST_EXTRA:
            if os.path.isfile(os.path.join(ROOT, top)):
                extra = [top]
            else:
                extra = []
                for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, top)):
                    dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
                    rel = os.path.relpath(dirpath, ROOT)
                    extra += [os.path.join(rel, f) for f in sorted(filenames)]
            self.filelist.files += [f for f in extra if f not in have]
        super().make_distribution()


cmdclass = {"build_py": build_py, "sdist": sdist}
if _bdist_wheel is not None:

    class bdist_wheel(_bdist_wheel):
        """A platform wheel for any Python 3: py3-none-<platform>."""

        def finalize_options(self):
            super().finalize_options()
            self.root_is_pure = False

        def get_tag(self):
            _, _, plat = super().get_tag()
            return "py3", "none", plat

    cmdclass["bdist_wheel"] = bdist_wheel

setup(
    cmdclass=cmdclass,
    distclass=BinaryDistribution,
    options={"build": {"build_base": BUILD_BASE}},
    zip_safe=False,
)
