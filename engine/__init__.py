"""The generic rule engine: facts, packs, compiler, backends, ranking and the evidence gate."""
