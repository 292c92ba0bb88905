"""The GPUs' data-sheet peak FLOP/s, by name and precision, for MFU (machinery; no paper
section: flops.peak_flops divides by them)."""
import re

# Each GPU's peak FLOP/s as (half precision, float32): "half" the dense fp16 /
# bf16 tensor-core peak with float32 accumulation (what autocast's matrix products run; a
# GeForce card runs fp16 accumulation at twice that, which autocast does not use), "float32"
# the dense TF32 tensor-core peak on sm_80 and newer (training enables TF32 for what stays in
# float32), else the plain FP32 peak. Dense figures, never "with sparsity", at the boost clock
# of the reference card (Turing's Founders Editions are clocked higher). From NVIDIA's
# documents: the Tesla P100 data sheet (SXM2, PCIe); the Tesla V100 and V100S data sheets;
# the Turing GPU Architecture whitepaper, Appendix A (RTX 2080 Ti, 2080, 2070) and the T4
# data sheet; the A100 Tensor Core GPU Architecture whitepaper and the A100, A10 and A10G
# data sheets (the A10G's is NVIDIA's sheet for Amazon EC2 G5); the Ampere GA102 GPU
# Architecture whitepaper, Appendix A (RTX 3090, 3080, 3070); the Ada GPU Architecture
# whitepaper, Appendix A (RTX 4090, 4080, 4080 12GB, sold as the 4070 Ti) and the L4, L40
# and L40S data sheets; the H100 Tensor Core GPU Architecture whitepaper and the H100, H200
# and GH200 data sheets. A GeForce card those tables leave out (SUPER, Ti, smaller) is its CUDA
# cores x 2 x boost clock for FP32 (NVIDIA's specifications page) and its architecture's
# ratio in the tables for the rest: half 4x FP32 on Turing, 2x on Ampere and Ada; TF32 1x.
# GPUs without tensor cores list as half what fp16 with float32 accumulation may reach: the
# GTX 16xx their fp16 rate, twice FP32 (no NVIDIA table; an upper bound: the fp16 units that
# stand in for tensor cores run the tensor instructions at an unpublished rate with float32
# accumulation), the P100 and GTX 10xx their FP32 rate (sm_6x trains in float32 anyway; the
# P100's fp16 rate, twice FP32, accumulates in fp16).
# Matched as whole words of the device's name, the longest name first: "L4" is not "L40S",
# "RTX 3080" not "RTX 3080 Ti", "A10" not "A100", "P100" (SXM2) not "P100 PCIe".
GPU_PEAK = {
    # data centre: Hopper, Ada, Ampere, Turing, Volta, Pascal
    "H200": (989e12, 494e12), "H200 NVL": (835e12, 418e12), "GH200": (989e12, 494e12),
    "H100": (989e12, 494e12), "H100 PCIe": (756e12, 378e12), "H100 NVL": (835e12, 418e12),
    "L40S": (362e12, 183e12), "L40": (181e12, 90.5e12), "L4": (121e12, 60e12),
    "A100": (312e12, 156e12), "A10": (125e12, 62.5e12), "A10G": (70e12, 35e12),
    "T4": (65e12, 8.1e12), "V100": (125e12, 15.7e12), "V100 PCIe": (112e12, 14e12),
    "V100S": (130e12, 16.4e12), "P100": (10.6e12, 10.6e12), "P100 PCIe": (9.3e12, 9.3e12),
    # GeForce RTX 40xx (Ada): fp16 tensor with float32 accumulation is 2x the FP32 rate
    "RTX 4090": (165.2e12, 82.6e12), "RTX 4080 SUPER": (104.4e12, 52.2e12),
    "RTX 4080": (97.5e12, 48.7e12), "RTX 4070 Ti SUPER": (88.2e12, 44.1e12),
    "RTX 4070 Ti": (80.2e12, 40.1e12), "RTX 4070 SUPER": (71e12, 35.5e12),
    "RTX 4070": (58.3e12, 29.1e12), "RTX 4060 Ti": (44.1e12, 22.1e12),
    "RTX 4060": (30.2e12, 15.1e12),
    # GeForce RTX 30xx (Ampere); TF32 runs at the FP32 rate on these
    "RTX 3090 Ti": (80e12, 40e12), "RTX 3090": (71e12, 35.6e12), "RTX 3080 Ti": (68.2e12, 34.1e12),
    "RTX 3080": (59.5e12, 29.8e12), "RTX 3070 Ti": (43.5e12, 21.7e12),
    "RTX 3070": (40.6e12, 20.3e12), "RTX 3060 Ti": (32.4e12, 16.2e12),
    "RTX 3060": (25.5e12, 12.7e12), "RTX 3050": (18.2e12, 9.1e12),
    # GeForce RTX 20xx (Turing): fp16 tensor cores, no bf16, no TF32
    "RTX 2080 Ti": (53.8e12, 13.4e12), "RTX 2080 SUPER": (44.6e12, 11.2e12),
    "RTX 2080": (40.3e12, 10.1e12), "RTX 2070 SUPER": (36.3e12, 9.1e12),
    "RTX 2070": (29.9e12, 7.5e12), "RTX 2060 SUPER": (28.7e12, 7.2e12),
    "RTX 2060": (25.8e12, 6.5e12),
    # GeForce GTX 16xx (Turing without tensor cores: fp16 at twice the FP32 rate)
    "GTX 1660 Ti": (10.9e12, 5.4e12), "GTX 1660 SUPER": (10.1e12, 5.0e12),
    "GTX 1660": (10.1e12, 5.0e12), "GTX 1650": (6.0e12, 3.0e12),
    # GeForce GTX 10xx (Pascal): no tensor cores, fp16 at 1/64 rate: float32 (auto's choice)
    "GTX 1080 Ti": (11.3e12, 11.3e12), "GTX 1080": (8.9e12, 8.9e12),
    "GTX 1070 Ti": (8.2e12, 8.2e12), "GTX 1070": (6.5e12, 6.5e12),
    "GTX 1060": (4.4e12, 4.4e12), "GTX 1050 Ti": (2.1e12, 2.1e12),
}


def gpu_peak(name, precision):
    """(peak FLOP/s, the key matched) of the GPU called `name` (torch.cuda.get_device_name:
    "Tesla T4", "NVIDIA GeForce RTX 3080 Ti", "NVIDIA H100 80GB HBM3") in `precision`
    ("bf16", "fp16" or "fp32"), or (None, None) for a GPU not in GPU_PEAK."""
    name = name.replace("-", " ")                 # "Tesla V100-PCIE-32GB": V100 PCIe
    for key in sorted(GPU_PEAK, key=len, reverse=True):          # the longest name first
        if re.search(rf"(?<![\w]){re.escape(key)}(?![\w])", name, re.IGNORECASE):
            half, fp32 = GPU_PEAK[key]
            return (fp32 if precision == "fp32" else half), key
    return None, None
