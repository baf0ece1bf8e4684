"""The models the training kernels train, beside each other: the framework-neutral catalogue
(``catalogue.py``: names, shapes, FLOPs, synthetic data), and each model built in Keras
(``keras_models.py``, ``gpt_keras.py``) and in ``torch.nn`` (``torch_models.py``, ``gpt_torch.py``)
from it. The builders import the catalogue, never each other."""
