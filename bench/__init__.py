"""Speed measurements (not tests): each script prints a table and compares with a baseline."""
