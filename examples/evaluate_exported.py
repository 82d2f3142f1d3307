#!/usr/bin/python3
"""Test accuracy of an exported model on Fashion-MNIST, in plain PyTorch
(no psclient): the TorchScript file `python3 -m psclient.export_model JOB
-o model.ts` wrote (docs/TUTORIAL.md).

    python3 examples/evaluate_exported.py model.ts [--data-dir=DIR]

Prints one line, e.g. "test_accuracy=0.812300 examples=10000" (the job
reports its accuracy to the 4th decimal: `psctl status JOB`).
"""

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fmnist  # noqa: E402  (numpy and torch only)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("model", help="a TorchScript file (.ts)")
    p.add_argument("--data-dir", default=fmnist.DATA_DIR)
    a = p.parse_args()
    torch.set_num_threads(1)
    model = torch.jit.load(a.model)
    test = fmnist.load("t10k", data_dir=a.data_dir)
    print("test_accuracy=%.6f examples=%d"
          % (fmnist.accuracy(model, test), len(test)))


if __name__ == "__main__":
    main()
