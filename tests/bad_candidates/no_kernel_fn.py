"""Defines the kernel under the wrong name."""
import torch


def softmax(x):
    return x
