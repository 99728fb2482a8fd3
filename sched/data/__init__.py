"""Data the simulated engine ships with.

* ``device_a100.json``: the ``device`` truth's parameters (``servecal.device_truth/1``),
  written by ``scripts/derive_device_truth.py`` from public A100 profiles (docs/truth.md).
* ``device_a100_fitted.json``: the cost table fitted on samples of that truth (the
  ``fitted`` predictor), written by ``scripts/fit_device_table.py``.
* ``fleet_devices.json``: the fleet devices of ``servecal plan`` (A100 and H100 at TP 1
  and 2, Llama-3-8B) as overrides of that truth, with the measured ratios they come
  from, and ``device_{a100x2,h100x1,h100x2}_fitted.json``, their fitted tables; both
  written by ``scripts/derive_fleet_devices.py`` (docs/capacity.md).
* ``aiconfigurator_{a100,h100}_sxm_vllm0.14/``: aiconfigurator's A100-SXM4-80GB and
  H100 80GB HBM3 vLLM 0.14.0 operator tables (ai-dynamo/aiconfigurator @ 095f58a5,
  Apache-2.0: ``LICENSE`` and ``SOURCE.md`` in each), cut to the bf16 rows Llama-3-8B's
  import at TP 1 and 2 reads, by ``scripts/aiconfigurator_slice.py``;
  ``imported_{a100,h100}x{1,2}/``: their imports (``samples.csv`` with its
  ``samples.fingerprint.json``: a plan device's truth; ``table.json``: its P50 table), by
  ``scripts/derive_imported_devices.py`` (docs/capacity.md).
* ``aiconfigurator_h100_sxm_vllm0.24_llama-3-8b/``: aiconfigurator's H100 vLLM 0.24.0 GEMM
  (bf16 and fp8) and attention (bf16 and fp8 KV cache) rows for Llama-3-8B at TP 1, from
  the ``aiconfigurator-core`` 0.12.0 wheel (Apache-2.0, ``LICENSE`` and ``SOURCE.md``);
  ``imported_h100x1_vllm0.24_{bf16,fp8}/``: its bf16 and its fp8-weights-and-KV imports
  (the same files as above), the dtype candidates of ``examples/capacity/azure_fp8.toml``.
* ``aiconfigurator_b200_sxm_vllm0.24_llama-3-8b/``: the same for the B200, whose GEMMs also
  have 4-bit (``nvfp4``) weight rows (``servecal import aiconfigurator --dtype nvfp4``).
* ``azure_conv_head4000.csv``: the first 4,000 rows of the Azure LLM inference trace
  2023, conversation service (Azure/AzurePublicDataset @ b469a113,
  ``data/AzureLLMInferenceTrace_conv.csv``, CC-BY 4.0; Patel et al., "Splitwise",
  ISCA 2024), unchanged: the trace ``examples/capacity/`` plans for.
"""
