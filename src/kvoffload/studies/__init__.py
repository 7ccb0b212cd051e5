"""Questions answered with the model and the engines: alternatives, faster links, the article claims, validation, measuring this machine."""
