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
