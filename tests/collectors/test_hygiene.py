"""Measurement hygiene: each probe read from a stand-in for its source, and its warning."""

from __future__ import annotations

import os
import stat
import textwrap

import pytest

from collectors import hygiene
from collectors.hygiene import hygiene_warnings, machine_state


def fake_command(directory, name: str, output: str, status: int = 0) -> None:
    """An executable ``name`` on a PATH of our own that prints ``output``."""
    script = directory / name
    script.write_text(f"#!/bin/sh\ncat <<'EOF'\n{output}\nEOF\nexit {status}\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)


@pytest.fixture
def path_dir(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return bin_dir


def test_cpu_governors_are_read_from_sysfs_and_scaling_ones_warned(tmp_path):
    for cpu, governor in (("cpu0", "powersave"), ("cpu1", "performance"), ("cpu2", "schedutil")):
        (tmp_path / cpu / "cpufreq").mkdir(parents=True)
        (tmp_path / cpu / "cpufreq" / "scaling_governor").write_text(governor + "\n")
    (tmp_path / "cpufreq").mkdir()  # not a CPU
    state = machine_state(sample_s=0.0, sysfs_cpu=tmp_path)
    assert state["cpu_governors"] == {
        "cpu0": "powersave",
        "cpu1": "performance",
        "cpu2": "schedutil",
    }
    [warning] = [w for w in state["warnings"] if "governor" in w]
    assert "powersave/schedutil on 2 of 3 CPU(s)" in warning
    assert machine_state(sample_s=0.0, sysfs_cpu=tmp_path / "none")["cpu_governors"] is None


class FakeProcess:
    def __init__(self, pid: int, name: str, share: float):
        self.pid, self.info, self.share, self.calls = pid, {"name": name}, share, 0

    def cpu_percent(self, interval=None) -> float:
        self.calls += 1
        return 0.0 if self.calls == 1 else self.share


def test_other_busy_processes_are_listed_busiest_first_and_warned():
    procs = [
        FakeProcess(101, "idle", 0.5),
        FakeProcess(102, "compiler", 95.0),
        FakeProcess(os.getpid(), "this sweep", 100.0),
        FakeProcess(103, "browser", 30.0),
    ]
    busy = hygiene._busy_processes(0.0, procs)
    assert busy == [
        {"pid": 102, "name": "compiler", "cpu_percent": 95.0},
        {"pid": 103, "name": "browser", "cpu_percent": 30.0},
    ]
    [warning] = hygiene_warnings({"busy_processes": busy})
    assert warning.startswith("2 other busy process(es): compiler (pid 102, 95%)")


def test_processes_on_the_gpu_come_from_nvidia_smi(path_dir):
    fake_command(path_dir, "nvidia-smi", "4242, python3, 1530\n99, Xorg, 12")
    apps = hygiene._gpu_processes()
    assert apps == [
        {"pid": 4242, "name": "python3", "used_memory_mib": 1530},
        {"pid": 99, "name": "Xorg", "used_memory_mib": 12},
    ]
    assert (
        "2 other process(es) on the GPU: python3 (pid 4242)"
        in hygiene_warnings({"gpu_processes": apps})[0]
    )
    fake_command(path_dir, "nvidia-smi", "", status=9)  # no driver: nothing known
    assert hygiene._gpu_processes() is None


def test_gpu_free_of_other_processes_is_quiet(path_dir):
    fake_command(path_dir, "nvidia-smi", "")
    assert hygiene._gpu_processes() == []
    assert hygiene_warnings({"gpu_processes": []}) == []


def test_macos_power_source_and_thermal_state_from_pmset(path_dir, monkeypatch):
    fake_command(
        path_dir,
        "pmset",
        textwrap.dedent(
            """\
            Now drawing from 'Battery Power'
             -InternalBattery-0 (id=123)	81%; discharging; 4:10 remaining present: true
            CPU_Scheduler_Limit 	= 100
            CPU_Available_CPUs 	= 12
            CPU_Speed_Limit 	= 70"""
        ),
    )
    monkeypatch.setattr(hygiene.platform, "system", lambda: "Darwin")
    source, thermal = hygiene._macos_power()
    assert source == "Battery Power" and thermal["CPU_Speed_Limit"] == 70
    warnings = hygiene_warnings({"power_source": source, "thermal": thermal})
    assert warnings == [
        "running on Battery Power: macOS may lower clocks; plug in",
        "thermal throttling: CPU speed limited to 70%",
    ]
    monkeypatch.setattr(hygiene.platform, "system", lambda: "Linux")
    assert hygiene._macos_power() == (None, None)  # never asked outside macOS


def test_a_busy_load_average_is_warned_relative_to_the_cpus():
    assert hygiene_warnings({"load_average": [0.9, 1, 1], "cpu_count": 1}) == []
    assert hygiene_warnings({"load_average": [1.5, 1, 1], "cpu_count": 4}) == []
    [warning] = hygiene_warnings({"load_average": [2.5, 1, 1], "cpu_count": 4})
    assert warning.startswith("load average 2.5 over 4 CPU(s)")


def test_machine_state_is_plain_json_with_every_probe():
    import json

    state = machine_state(sample_s=0.01)
    assert set(state) == {
        "load_average",
        "cpu_count",
        "busy_processes",
        "cpu_governors",
        "gpu_processes",
        "power_source",
        "thermal",
        "warnings",
    }
    assert json.loads(json.dumps(state)) == state
