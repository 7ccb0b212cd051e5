"""Presentation: tables and charts for the chapters, from frames the studies compute."""
