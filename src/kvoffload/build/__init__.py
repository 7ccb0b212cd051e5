"""The book: executing chapters per profile and building the offline site."""
