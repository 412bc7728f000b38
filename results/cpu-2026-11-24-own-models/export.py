"""Export the model with a dynamic batch: python export.py small.pt2"""
import sys

import torch

from mypkg.nets import build

model, (x,) = build(2)
program = torch.export.export(model.eval(), (x,),
                              dynamic_shapes=({0: torch.export.Dim("batch", min=1, max=64)},))
torch.export.save(program, sys.argv[1])
