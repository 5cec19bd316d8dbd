"""The estimator: per-GPU memory (`memory`, with `activations` for what autograd saves and `allocator` /
`alloc_trace` for what PyTorch's caching allocator reserves), the time model (`throughput`), one `engine`
per model that memoises both and searches the largest shape under a byte limit, and `fit` (does a run fit
on a card, and which change would make it fit). The entry points that take a model by name are in
advisor/api.py."""
