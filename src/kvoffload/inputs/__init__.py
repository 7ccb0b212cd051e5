"""Inputs and their schemas: units, figures with sources, the catalog, hardware parts, models, formats."""
