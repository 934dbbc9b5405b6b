"""vlbind: reproduce 'Seeing to Generalize: How Visual Data Corrects Binding Shortcuts' (arXiv 2602.15183)."""

__version__ = "0.1.0"
