"""One module per engine, each declaring ``ENGINE``; the registry finds them here and no engine imports another."""
