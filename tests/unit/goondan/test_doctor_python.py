"""`goondan doctor` tells an interpreter built for speed from one that costs the agents CPU."""

from goondan.cli.doctor_python import SLOW_BUILD_FIX, check_interpreter_build

# /proc/self/maps lines, as the kernel writes them.
STATIC = """\
55d0c3a00000-55d0c3a3e000 r--p 00000000 fe:00 1312   /usr/bin/python3.11
7f1c2a000000-7f1c2a022000 r--p 00000000 fe:00 2210   /usr/lib/x86_64-linux-gnu/libc.so.6
7ffd0d5e2000-7ffd0d603000 rw-p 00000000 00:00 0      [stack]
"""
PYENV = """\
55f4a1c00000-55f4a1c01000 r--p 00000000 fe:00 9001 /u/.pyenv/versions/3.13/bin/python3.13
7f71e9c00000-7f71e9d0f000 r--p 00000000 fe:00 9002 /u/.pyenv/versions/3.13/lib/libpython3.13.so.1.0
7f71e9d0f000-7f71ea0d1000 r-xp 0010f000 fe:00 9002 /u/.pyenv/versions/3.13/lib/libpython3.13.so.1.0
"""
FREE_THREADED = "7f71e9c00000-7f71e9d0f000 r-xp 00000000 fe:00 9 /opt/lib/libpython3.13t.so.1.0\n"

# What sysconfig says of each build (the variables the check reads; the rest None).
PYENV_DEFAULT = {"CONFIG_ARGS": "'--prefix=/u/.pyenv/versions/3.13.0' '--enable-shared'"}
PYTHON_ORG_OPTIMISED = {
    "CONFIG_ARGS": "'--enable-shared' '--enable-optimizations' '--with-lto'",
    "PY_CFLAGS_NODIST": "-std=c11 -fno-semantic-interposition -flto -fuse-linker-plugin",
}
FEDORA = {"CONFIG_ARGS": "'--enable-shared'", "CFLAGS_NODIST": "-fno-semantic-interposition"}


def doctor(mappings: str, config: dict[str, str]):
    return check_interpreter_build(mappings, config.get)


def test_pyenvs_default_shared_build_is_a_warning_with_the_way_out():
    check = doctor(PYENV, PYENV_DEFAULT)

    assert check.status == "warn" and check.area == "python"
    assert "libpython3.13.so.1.0" in check.what and "without optimisations" in check.what
    assert check.fix == SLOW_BUILD_FIX and "--enable-optimizations" in check.fix


def test_a_statically_linked_interpreter_is_ok_whatever_its_configure_said():
    # Debian's python3 links libpython statically, while its sysconfig describes the shared one.
    check = doctor(STATIC, PYENV_DEFAULT)

    assert check.status == "ok" and "linked statically" in check.what


def test_a_shared_build_with_optimisations_is_ok():
    assert doctor(PYENV, PYTHON_ORG_OPTIMISED).status == "ok"
    assert doctor(PYENV, FEDORA).status == "ok"


def test_a_library_replaced_on_disk_since_the_start_still_counts():
    # An upgrade while the process runs: the kernel marks the old mapping " (deleted)".
    check = doctor(PYENV.replace("so.1.0\n", "so.1.0 (deleted)\n"), PYENV_DEFAULT)

    assert check.status == "warn" and "libpython3.13.so.1.0" in check.what


def test_a_free_threaded_library_is_recognised():
    check = doctor(FREE_THREADED, PYENV_DEFAULT)

    assert check.status == "warn" and "libpython3.13t.so.1.0" in check.what
