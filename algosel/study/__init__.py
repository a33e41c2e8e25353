"""The analyst's tools: the HTML report, the evaluation report and cuDNN API log analysis."""
