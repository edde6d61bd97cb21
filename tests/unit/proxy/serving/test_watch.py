"""`watch_file`: reloads on every kind of change, and only on a change of content."""

from __future__ import annotations

import os
from pathlib import Path

import trio

from proxy.serving.watch import watch_file

PERIOD = 0.02


async def _settle() -> None:
    await trio.sleep(PERIOD * 6)


async def test_in_place_writes_reload_once_per_new_content(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    path = tmp_path / "proxy.yaml"
    path.write_text("a: 1\n")
    calls: list[str] = []
    nursery.start_soon(watch_file, path, PERIOD, lambda: calls.append(path.read_text()))
    await _settle()
    assert calls == []
    path.write_text("a: 2\n")
    await _settle()
    assert calls == ["a: 2\n"]
    path.write_text("a: 2\n")  # same content again: nothing to reload
    os.utime(path)
    await _settle()
    assert calls == ["a: 2\n"]


async def test_a_configmap_style_symlink_swap_is_seen(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    """The kubelet writes a new timestamped folder and renames a `..data` symlink onto it;
    the file the proxy was given is a symlink through `..data`."""
    mount = tmp_path / "mount"
    mount.mkdir()
    first = mount / "..2026_01_01_v1"
    first.mkdir()
    (first / "proxy.yaml").write_text("v: 1\n")
    (mount / "..data").symlink_to(first.name)
    (mount / "proxy.yaml").symlink_to("..data/proxy.yaml")
    calls: list[str] = []
    path = mount / "proxy.yaml"
    nursery.start_soon(watch_file, path, PERIOD, lambda: calls.append(path.read_text()))
    await _settle()
    second = mount / "..2026_01_01_v2"
    second.mkdir()
    (second / "proxy.yaml").write_text("v: 2\n")
    (mount / "..data_tmp").symlink_to(second.name)
    os.replace(mount / "..data_tmp", mount / "..data")
    await _settle()
    assert calls == ["v: 2\n"]


async def test_a_file_missing_for_a_while_is_looked_at_again(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    path = tmp_path / "proxy.yaml"
    path.write_text("a: 1\n")
    calls: list[int] = []
    nursery.start_soon(watch_file, path, PERIOD, lambda: calls.append(1))
    await _settle()
    path.unlink()
    await _settle()
    assert calls == []
    path.write_text("a: 3\n")
    await _settle()
    assert calls == [1]
