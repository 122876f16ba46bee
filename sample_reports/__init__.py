"""Synthetic sample exports made by nsysmap's own builder, with golden outputs."""
