"""Build tianyuan: the top-level folders map to one package, plus the native `tianyuan._C`.

Each ISA variant of a kernel family is its own translation unit (`*_avx2.cpp`,
`*_avx512.cpp`, `*_vnni.cpp`, `*_amx.cpp`; `*_vbmi.cpp` for AVX-512's byte permutes)
compiled with only that ISA's flags; the dispatcher picks one at import from the CPU's
features, so the wheel runs anywhere.
ISA translation units must not instantiate STL templates (inline functions compiled
with wider ISA flags could be chosen by the linker for the generic path too).
"""
import glob
import os

from pybind11.setup_helpers import ParallelCompile, Pybind11Extension, build_ext
from setuptools import find_namespace_packages, setup

ROOTS = {
    "tianyuan": "framework",
    "tianyuan.zoo": "zoo",
    "tianyuan.datasets": "datasets",
    "tianyuan.weights": "weights",
    "tianyuan.evaluation": "evaluation",
    "tianyuan.trainers": "trainers",
}

# -mprfchw: __builtin_prefetch(p, 1, ...) as prefetchw (the int8 tiles ask for their rows' next
# lines for writing, int8_cgemm.h store_ahead); CPUs without it run the opcode as a NOP.
ISA_FLAGS = {
    "avx2": ["-mavx2", "-mfma", "-mf16c", "-mprfchw"],
    "avxvnni": ["-mavx2", "-mfma", "-mf16c", "-mavxvnni", "-mprfchw"],
    "avx512": ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mfma"],
    "vnni": ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mavx512vnni", "-mfma",
             "-mprfchw"],
    "vbmi": ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512vbmi"],
    "amx": ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mavx512vnni", "-mfma",
            "-mavx512vbmi", "-mamx-tile", "-mamx-int8"],
}
BASE_FLAGS = ["-O3", "-fopenmp", "-fno-math-errno"]
# TIANYUAN_SANITIZE=address (any -fsanitize= value): an instrumented build for `make
# asan-test`, in a build folder of its own so that it never mixes objects with the normal one
# (the process needs the runtime preloaded: LD_PRELOAD=$(gcc -print-file-name=libasan.so)).
SANITIZE = os.environ.get("TIANYUAN_SANITIZE", "")
SANITIZE_FLAGS = [f"-fsanitize={SANITIZE}", "-fno-omit-frame-pointer", "-g"] if SANITIZE else []


def _packages():
    """Every folder, data-only ones (trainers/conf/*, datasets/meta, framework/csrc) as
    namespace packages, so setuptools finds each file it ships declared (it warned ~380
    lines otherwise)."""
    packages, package_dir = [], {}
    for name, folder in ROOTS.items():
        package_dir[name] = folder
        packages.append(name)
        for sub in find_namespace_packages(folder, exclude=["__pycache__*", "*.__pycache__"]):
            packages.append(f"{name}.{sub}")
    return packages, package_dir


def _isa_of(source):
    stem = os.path.splitext(os.path.basename(source))[0]
    suffix = stem.rsplit("_", 1)[-1]
    return suffix if suffix in ISA_FLAGS else None


class BuildExt(build_ext):
    """Adds each ISA translation unit's own flags on top of the common ones."""

    def build_extensions(self):
        compile_one = self.compiler._compile

        def _compile(obj, src, ext, cc_args, extra_postargs, pp_opts):
            extra = list(extra_postargs) + ISA_FLAGS.get(_isa_of(src), [])
            compile_one(obj, src, ext, cc_args, extra, pp_opts)

        self.compiler._compile = _compile
        super().build_extensions()

    def copy_extensions_to_source(self):
        """An in-place build unlinks the old library before writing the new one: a running
        process keeps its mapping of the old file (overwriting it in place is a SIGBUS there)."""
        for ext in self.extensions:
            package = ".".join(ext.name.split(".")[:-1])
            folder = self.get_finalized_command("build_py").get_package_dir(package)
            target = os.path.join(folder, os.path.basename(self.get_ext_filename(ext.name)))
            if os.path.exists(target):
                os.unlink(target)
        super().copy_extensions_to_source()


def _stale(obj, src):
    """An object is rebuilt when its source or any header under framework/csrc is newer (a
    kept build folder, `python setup.py build_ext --inplace`, then recompiles only what an
    edit touched; pip's isolated builds start empty and compile everything)."""
    built = os.stat(obj).st_mtime
    return built < os.stat(src).st_mtime or built < _NEWEST_HEADER


_NEWEST_HEADER = max(os.stat(h).st_mtime
                     for h in glob.glob("framework/csrc/**/*.h", recursive=True))
ParallelCompile("TIANYUAN_BUILD_JOBS", default=0, needs_recompile=_stale).install()
packages, package_dir = _packages()
# one folder per kernel family under framework/csrc (framework/csrc/README.md)
sources = sorted(glob.glob("framework/csrc/**/*.cpp", recursive=True))
ext = Pybind11Extension(
    "tianyuan._C",
    sources,
    include_dirs=["framework/csrc"],
    # a header change rebuilds the extension (without this an in-place build after editing
    # only a header kept the old .so)
    depends=sorted(glob.glob("framework/csrc/**/*.h", recursive=True)),
    extra_compile_args=BASE_FLAGS + SANITIZE_FLAGS,
    extra_link_args=["-fopenmp"] + SANITIZE_FLAGS,
    define_macros=[("TIANYUAN_BUILD_FLAGS", '"' + " ".join(BASE_FLAGS + SANITIZE_FLAGS) + '"')],
    cxx_std=17,
)

setup(
    packages=packages,
    package_dir=package_dir,
    package_data={"tianyuan.trainers": ["conf/**/*.yaml"], "tianyuan.datasets": ["meta/*"],
                  "tianyuan.trainers.conf": ["*.yaml", "**/*.yaml"],
                  "tianyuan.datasets.meta": ["*"]},
    ext_modules=[ext],
    cmdclass={"build_ext": BuildExt},
    options={"build": {"build_base": f"build/sanitize-{SANITIZE}"}} if SANITIZE else {},
)
