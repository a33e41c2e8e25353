"""The learned selector: features, the LightGBM ranker, tuning, training, evaluation and the model artifact."""
