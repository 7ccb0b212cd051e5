"""Engines: what each system keeps where and moves per step, as placements and rules on the step model.

Each engine module has an ``Options`` model (the scenario's ``options:``, validated) and a
``predict(scenario) -> Prediction``; ``registry`` maps engine names to them and ``scenario`` reads
scenario files. ``generic`` is the step model with the scenario's own placement.
"""
