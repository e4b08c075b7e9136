"""Models: loading targets and drafters (offline default, Hub id, folder, GGUF), reading their configs, random
targets of a real shape, the published drafters' file layouts, and tiny models for tests."""
