"""Helpers the tests share: paths, a scenario factory, the browser, chapters, refusals."""
