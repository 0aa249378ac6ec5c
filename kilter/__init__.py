"""kilter: fair-share quota, cohort borrowing and topology-aware gang placement for Kueue and Volcano."""

__version__ = "0.1.0"
