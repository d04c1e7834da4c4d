"""Compatibility with other tools' files and APIs: `vtrain_ml.compat.vtrain` is vTrain's Python
API (vTrainConfig, vTrain) as a drop-in."""
