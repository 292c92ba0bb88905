"""machinery/device.py: bf16 autocast only where the CPU has bf16 instructions (not emulated)."""
from machinery import device


def _cpuinfo(tmp_path, line):
    p = tmp_path / "cpuinfo"
    p.write_text(f"processor\t: 0\nmodel name\t: some cpu\n{line}\n\nprocessor\t: 1\n")
    return str(p)


def test_cpu_flags_reads_x86_and_arm_lines(tmp_path):
    assert "avx512_bf16" in device.cpu_flags(_cpuinfo(tmp_path, "flags\t\t: fpu avx512f avx512_bf16"))
    assert "bf16" in device.cpu_flags(_cpuinfo(tmp_path, "Features\t: fp asimd bf16 i8mm"))
    assert device.cpu_flags(str(tmp_path / "absent")) == set()


def test_emulated_bf16_is_not_native(monkeypatch):
    """AVX-512 without AVX512-BF16 (the machine where bf16 ran at half float32's speed)."""
    for flags, expect in [("fpu avx512f avx512bw avx512vl avx512_vnni", False),
                          ("fpu avx512f avx512_bf16", True), ("fpu amx_bf16 amx_tile", True)]:
        monkeypatch.setattr(device, "cpu_flags", lambda f=flags: set(f.split()))
        device.native_bf16.cache_clear()
        assert device.native_bf16("cpu") is expect, flags
    device.native_bf16.cache_clear()


# ----------------------------------------------------------------------------- GPUs, stood in

import pytest  # noqa: E402
import torch  # noqa: E402

import flops  # noqa: E402

# (name as torch.cuda.get_device_name gives it, compute capability, --precision auto's choice)
GPUS = [("Tesla T4", (7, 5), "fp16"), ("Tesla V100-SXM2-16GB", (7, 0), "fp16"),
        ("NVIDIA GeForce RTX 2080 Ti", (7, 5), "fp16"),
        ("NVIDIA GeForce GTX 1080 Ti", (6, 1), "fp32"), ("Tesla P100-PCIE-16GB", (6, 0), "fp32"),
        ("NVIDIA GeForce RTX 3060", (8, 6), "bf16"), ("NVIDIA GeForce RTX 4090", (8, 9), "bf16"),
        ("NVIDIA A100-SXM4-40GB", (8, 0), "bf16"), ("NVIDIA L4", (8, 9), "bf16"),
        ("NVIDIA H100 80GB HBM3", (9, 0), "bf16"), ("NVIDIA H200", (9, 0), "bf16")]
# what a CUDA 12.9 / 13.x build of PyTorch is built for: no sm_70 (V100) nor sm_6x
NEW_BUILD = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]


@pytest.fixture
def gpu(monkeypatch):
    """stand_in(name, capability, archs=...): torch believes one such GPU is there."""
    def stand_in(name, cc, archs=NEW_BUILD, cuda="12.9", driver=True):
        monkeypatch.setattr(torch.version, "cuda", cuda)
        monkeypatch.setattr(torch.version, "hip", None)
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: cc)
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: name)
        monkeypatch.setattr(torch.cuda, "get_arch_list", lambda: list(archs))
        monkeypatch.setattr(device, "nvidia_driver", lambda: driver)
        device.cuda_problem.cache_clear()
    yield stand_in
    device.cuda_problem.cache_clear()


@pytest.mark.parametrize("name, cc, expect", GPUS)
def test_auto_precision_for_each_gpu_class(gpu, name, cc, expect):
    """bf16 only where the tensor cores have it (sm_80+), fp16 with loss scaling on sm_70-75,
    float32 on sm_6x; MPS float32."""
    gpu(name, cc)
    chosen = device.pick_precision("auto", torch.device("cuda"))
    assert chosen.name == expect and chosen.scaled == (expect == "fp16")
    assert device.pick_precision("fp16", torch.device("cuda")).scaled
    assert device.pick_precision("auto", torch.device("mps")).name == "fp32"


@pytest.mark.parametrize("name, cc, expect", GPUS)
def test_each_gpu_has_its_peak_at_the_precision_that_runs(name, cc, expect):
    peak, key = flops.gpu_peak(name, expect)
    assert peak and key.lower() in name.replace("-", " ").lower()
    half, fp32 = flops.GPU_PEAK[key]
    assert peak == (fp32 if expect == "fp32" else half) and half >= fp32


def test_peaks_match_whole_names_longest_first(gpu):
    """"L4" is not "L40S", "RTX 3080" not "RTX 3080 Ti", "A10" not "A100", "P100" not "P100
    PCIe", "H200" not "GH200"; an unknown GPU has no peak rather than another's."""
    assert flops.gpu_peak("NVIDIA L40S", "bf16") == (362e12, "L40S")
    assert flops.gpu_peak("NVIDIA L4", "bf16") == (121e12, "L4")
    assert flops.gpu_peak("NVIDIA GeForce RTX 3080 Ti", "bf16")[1] == "RTX 3080 Ti"
    assert flops.gpu_peak("NVIDIA GeForce RTX 3080", "bf16")[1] == "RTX 3080"
    assert flops.gpu_peak("NVIDIA A10", "bf16")[1] == "A10"
    assert flops.gpu_peak("NVIDIA H100 PCIe", "bf16") == (756e12, "H100 PCIe")
    assert flops.gpu_peak("Tesla V100-PCIE-32GB", "fp16") == (112e12, "V100 PCIe")
    assert flops.gpu_peak("Tesla P100-PCIE-16GB", "fp32") == (9.3e12, "P100 PCIe")
    assert flops.gpu_peak("Tesla P100-SXM2-16GB", "fp16") == (10.6e12, "P100")  # FP32 rate
    assert flops.gpu_peak("NVIDIA A10G", "bf16") == (70e12, "A10G")
    assert flops.gpu_peak("NVIDIA H200 NVL", "bf16") == (835e12, "H200 NVL")
    assert flops.gpu_peak("NVIDIA GH200 480GB", "fp32") == (494e12, "GH200")  # not "H200"
    assert flops.gpu_peak("Quadro RTX 8000", "fp16") == (None, None)
    gpu("Tesla T4", (7, 5))
    assert flops.peak_flops("cuda", "fp16") == (65e12, "Tesla T4 fp16 data sheet")
    assert flops.peak_flops("cuda", "fp32")[0] == 8.1e12
    assert flops.peak_flops("cuda")[0] == 65e12            # auto: fp16 on a T4


def one_line(message):
    return "\n" not in message and "Traceback" not in message


def test_a_gpu_the_build_lacks_is_one_line_naming_the_wheel(gpu):
    """A V100 (sm_70) under a build without sm_70: the CUDA 12.6 wheel, which has it."""
    gpu("Tesla V100-SXM2-16GB", (7, 0))
    with pytest.raises(device.DeviceError) as e:
        device.pick_device()
    msg = str(e.value)
    assert one_line(msg) and "sm_70" in msg and "--device cpu" in msg
    if getattr(torch.cuda, "PYTORCH_RELEASES_CODE_CC", None):   # torch's table of wheels
        assert "--index-url https://download.pytorch.org/whl/cu126" in msg
    gpu("Tesla V100-SXM2-16GB", (7, 0), archs=["sm_50", "sm_60", "sm_70", "sm_75", "sm_80"])
    assert device.pick_device() == torch.device("cuda")
    gpu("NVIDIA GeForce RTX 3060", (8, 6), archs=["sm_80", "sm_90"])   # sm_80 runs on 8.6
    assert device.pick_device() == torch.device("cuda")
    gpu("NVIDIA H200", (9, 0), archs=["sm_80", "compute_80"])          # PTX runs later GPUs
    assert device.pick_device() == torch.device("cuda")


def test_an_unusable_gpu_is_one_line_never_a_silent_cpu_run(gpu, monkeypatch):
    gpu("Tesla T4", (7, 5))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    device.cuda_problem.cache_clear()
    with pytest.raises(device.DeviceError, match="sees no GPU") as e:
        device.pick_device()
    assert one_line(str(e.value))

    def too_old():
        import warnings
        warnings.warn("CUDA initialization: The NVIDIA driver on your system is too old "
                      "(found version 11040).")
        return False
    monkeypatch.setattr(torch.cuda, "is_available", too_old)
    device.cuda_problem.cache_clear()
    with pytest.raises(device.DeviceError, match="driver is too old") as e:
        device.pick_device("cuda")
    assert one_line(str(e.value))
    monkeypatch.setattr(torch.version, "cuda", None)            # the CPU build of PyTorch
    device.cuda_problem.cache_clear()
    with pytest.raises(device.DeviceError, match="CPU build") as e:
        device.pick_device()
    assert one_line(str(e.value))
    assert device.pick_device("cpu") == torch.device("cpu")     # asked for: no complaint
    monkeypatch.setattr(device, "nvidia_driver", lambda: False)  # no GPU at all: the CPU
    device.cuda_problem.cache_clear()
    assert device.pick_device() == torch.device("cpu")


def test_a_compile_that_would_be_refused_is_said_first(gpu):
    gpu("NVIDIA GeForce GTX 1080 Ti", (6, 1))
    line = device.compile_refusal(torch.device("cuda"), "fp32")
    assert one_line(line) and "sm_61" in line and "7.0" in line
    gpu("Tesla T4", (7, 5))
    line = device.compile_refusal(torch.device("cuda"), "bf16")
    assert one_line(line) and "--precision fp16" in line
    line = device.compile_refusal(torch.device("cuda"), "fp16")
    assert line is None or "pip install triton" in line         # (no Triton on a CPU box)
    assert device.compile_refusal(torch.device("cpu"), "bf16") is None


def test_an_unusable_gpu_stops_the_command_lines_in_one_line(gpu, tmp_path, capsys):
    """electra_small.py and finetune_glue.py: one error line, exit 1 or 2, nothing written."""
    import electra_small
    import finetune_glue
    gpu("Tesla V100-SXM2-16GB", (7, 0))
    capsys.readouterr()
    rc = electra_small.main(["--size", "tiny", "--max_steps", "1", "--out_dir",
                             str(tmp_path / "o")])
    err = capsys.readouterr().err.strip()
    assert rc == 1 and err.startswith("error: ") and one_line(err) and "sm_70" in err
    assert not (tmp_path / "o").exists()
    with pytest.raises(SystemExit) as e:
        finetune_glue.main(["--ckpt", str(tmp_path / "c.pt"), "--glue_dir", str(tmp_path)])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert e.value.code == 2 and "sm_70" in err
