"""The names every layer reads: settings and the config error, the stage and variant names, the vocabulary, the
config schema, files and logs, the device. Imports nothing of vlbind above it; no torch but in device."""
