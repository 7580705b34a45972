"""Models: the resolver (public names -> offline carriers, local folders, the hub), the encoders,
the variants a placement runs, the ONNX rewrites behind them, and fine-tuning."""
