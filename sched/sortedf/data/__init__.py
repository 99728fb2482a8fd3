"""Length samples bundled for ``--generate`` (4,000 seeded rows of each source, unchanged).

* ``azure_conv_lengths.csv``: ContextTokens/GeneratedTokens of the Azure LLM inference
  trace, conversation service, 2023-11-16 (Azure/AzurePublicDataset @ b469a113,
  CC-BY 4.0; Patel et al., "Splitwise", ISCA 2024).
* ``arxiv_summarization_lengths.csv``: prefill/decode token counts of arXiv
  summarisation requests (microsoft/vidur @ 7d475133, MIT).
"""
