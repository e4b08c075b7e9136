"""energy.py: power samples added up over time, nvidia-smi's lines read, the GPUs a run uses found, and on a
CPU no meter and a sentence that says so (a GPU's real figures are measured by `specviz bench --energy`)."""
import pytest

from specviz.measure.energy import (NOT_MEASURED_CPU, NvmlMeter, PowerIntegral, energy_lines, energy_meter,
    gpu_indices, parse_power_line)


@pytest.mark.quick
def test_power_held_until_the_next_sample_adds_up_to_joules():
    integral = PowerIntegral()
    assert integral.at(5.0) == 0  # no sample yet: nothing known
    integral.add(10.0, 100.0)
    integral.add(10.5, 300.0)  # 100 W for half a second
    assert integral.at(10.5) == pytest.approx(50.0)
    assert integral.at(11.0) == pytest.approx(50.0 + 150.0)  # the last sample's 300 W held until now
    integral.add(10.4, 999.0)  # a late sample adds nothing backwards in time
    assert integral.at(10.4) == pytest.approx(50.0)


@pytest.mark.quick
def test_nvidia_smi_lines_are_read_and_na_is_no_figure():
    assert parse_power_line(" 123.45") == pytest.approx(123.45)
    assert parse_power_line("100.0, 50.5") == pytest.approx(150.5)
    assert parse_power_line(" [N/A]") is None


@pytest.mark.quick
def test_the_gpus_a_run_uses_are_found_among_its_devices():
    assert gpu_indices(["cuda:1", "cuda:0", "cuda:1", "cpu"]) == [0, 1]
    assert gpu_indices(["0", "2", "disk"]) == [0, 2]  # a device map's placement
    assert gpu_indices(["cpu"]) == []


@pytest.mark.quick
def test_on_a_cpu_no_meter_and_the_bench_says_power_is_not_measured():
    meter, source = energy_meter(["cpu"])
    assert meter is None and source == NOT_MEASURED_CPU
    assert energy_lines({}, source, measured=False) == "energy: not measured (power is not measured on a CPU)"


@pytest.mark.quick
def test_nvml_meter_reads_joules_from_the_millijoule_counter_of_every_gpu():
    class FakeNvml:  # the counter NVML keeps per GPU, in millijoules
        counters = {0: 1_000_000, 1: 2_000_000}

        def nvmlDeviceGetHandleByIndex(self, index):
            return index

        def nvmlDeviceGetTotalEnergyConsumption(self, handle):
            return self.counters[handle]

    nvml = FakeNvml()
    meter = NvmlMeter(nvml, [0, 1])
    before = meter.read()
    nvml.counters[0] += 1500
    nvml.counters[1] += 500
    assert meter.read() - before == pytest.approx(2.0)
    assert NvmlMeter(nvml, [1]).read() == pytest.approx(2000.5)  # control: one GPU alone


@pytest.mark.quick
def test_energy_lines_give_joules_per_token_and_the_ratio_to_plain():
    summary = {"plain": {"overall": {"joules_per_token": 2.0}}, "ngram": {"overall": {"joules_per_token": 1.5}},
               "eagle": {"overall": {"joules_per_token": None}}}
    line = energy_lines(summary, "NVML total energy consumption", measured=True)
    assert "plain 2.000 J/token" in line and "ngram 1.500 J/token (0.75x plain's)" in line and "eagle" not in line


def test_without_nvml_a_gpu_is_metered_by_sampling_nvidia_smi(tmp_path, monkeypatch):
    import sys
    import time

    monkeypatch.setitem(sys.modules, "pynvml", None)  # nvidia-ml-py not installed
    smi = tmp_path / "nvidia-smi"  # stands in for the driver's tool: GPU 0 draws 200 W, sampled every 20 ms
    smi.write_text("#!/bin/sh\nwhile true; do echo '0, 200.00'; sleep 0.02; done\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    meter, source = energy_meter(["cuda:0"])
    try:
        assert source.startswith("nvidia-smi")
        before = meter.read()
        time.sleep(0.5)
        assert meter.read() - before == pytest.approx(100.0, rel=0.2)  # 200 W for half a second
    finally:
        meter.close()
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))  # control: neither NVML nor nvidia-smi
    meter, source = energy_meter(["cuda:0"])
    assert meter is None and "not measured here" in source and "nvidia-smi: not found" in source
