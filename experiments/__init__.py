"""Experiments: scripts that answered one question about the measurement once, kept beside
the commands and results folders that cite them (experiments/README.md lists them). Not part
of the product and not installed; the tools a developer runs day to day are in scripts/.
"""
