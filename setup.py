"""Extension table: every Cython kernel of src_cython/ built as a private jitsched module."""

import numpy as np
from Cython.Build import cythonize
from setuptools import Extension, setup

# One directive set for every kernel: kernels never validate, the Python wrappers do.
DIRECTIVES = {
    "language_level": "3",
    "boundscheck": False,
    "wraparound": False,
    "cdivision": True,
    "initializedcheck": False,
    "nonecheck": False,
}

KERNELS = ["_lat", "_alloc", "_sim"]

extensions = [
    Extension(
        f"jitsched.{name}",
        [f"src_cython/{name}.pyx"],
        include_dirs=[np.get_include()],
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
        extra_compile_args=["-O3"],
    )
    for name in KERNELS
]

setup(ext_modules=cythonize(extensions, compiler_directives=DIRECTIVES))
