"""Tools for developing nsysmap, not installed with it: synthetic exports, the browser driver."""
