"""The cost model: KV bytes, transfer times, the decode step, the event timeline, one prediction."""
