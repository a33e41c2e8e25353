"""The runtime: ``algosel.predict`` for any framework and the PyTorch hook."""
