"""``servecal bench``: drive a real OpenAI-compatible server with a servecal workload.

* :mod:`.client`: send the workload's requests at their arrival times (streaming,
  token ids as prompts), time every token as it arrives.
* :mod:`.server`: start and stop a vLLM OpenAI server (with the servecal plug-in
  or vLLM's own scheduler) when the bench is given a model folder.
* :mod:`.record`: turn what the client saw into a servecal run folder, the same
  columns and metrics as a simulated run, so ``report`` and ``validate`` read it.

Only loopback addresses are driven: the bench runs on the server's host.
"""
