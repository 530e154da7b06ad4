"""Charts (Altair) and the offline HTML report."""
