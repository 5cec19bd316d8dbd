"""What the user's run trains on and what it measured: a dataset's token count and lengths
(`dataset_tokens`, with the statistics in `length_stats`), the training configs `plan --from-config`
reads (`training_config`), and measured runs from a launch bundle (`measurements`)."""
