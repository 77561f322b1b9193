"""Vision models of transformers at new resolutions through one compiled model (tiny configs, CPU):
each call's largest error against eager and pipec's warnings. The second resolution makes Dynamo
retrace with symbolic height and width.

    python benchmarks/vision_resize.py swin      # also dinov2, vit, convnext
"""
import sys
import torch
import warnings
import pipec
import transformers as T
torch.manual_seed(0)
name = sys.argv[1]
if name == "dinov2":
    m = T.Dinov2Model(T.Dinov2Config(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64, image_size=32, patch_size=8))
elif name == "swin":
    m = T.SwinModel(T.SwinConfig(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[2, 2], window_size=2))
elif name == "vit":
    m = T.ViTModel(T.ViTConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64, image_size=32, patch_size=8))
elif name == "convnext":
    m = T.ConvNextModel(T.ConvNextConfig(hidden_sizes=[8, 16], depths=[1, 1], num_stages=2))
m = m.eval()
c = pipec.compile(m)
kw = {"interpolate_pos_encoding": True} if name in ("vit",) else {}
for side in ((32, 48, 64, 36, 44, 40, 52) if name == "swin" else (32, 48, 64)):
    x = torch.randn(1, 3, side, side)
    with warnings.catch_warnings(record=True) as w, torch.no_grad():
        warnings.simplefilter("always")
        out = c(pixel_values=x, **kw).last_hidden_state
        ref = m(pixel_values=x, **kw).last_hidden_state
    err = (out - ref).abs().max().item()
    print(name, side, f"{err:.2e}", [str(m_.message)[:1500] for m_ in w if "pipec" in str(m_.message)])
