"""Vision models of transformers at new resolutions through one compiled model (tiny configs, CPU):
each call's largest error against eager and pipec's warnings. The second resolution makes Dynamo
retrace with symbolic height and width.

    python benchmarks/vision_resize.py swin      # also dinov2, vit, convnext
"""

import argparse
import warnings

import torch
import transformers

import pipec

# model -> (its tiny model, extra call arguments, the resolutions it is called at, in order)
CASES = {
    "dinov2": (lambda: transformers.Dinov2Model(transformers.Dinov2Config(
        hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64, image_size=32,
        patch_size=8)), {}, (32, 48, 64)),
    # 36 and 44 pixels are 9 and 11 patches: the window grid is padded
    "swin": (lambda: transformers.SwinModel(transformers.SwinConfig(
        image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[2, 2], window_size=2)), {},
        (32, 48, 64, 36, 44, 40, 52)),
    "vit": (lambda: transformers.ViTModel(transformers.ViTConfig(
        hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64, image_size=32,
        patch_size=8)), {"interpolate_pos_encoding": True}, (32, 48, 64)),
    "convnext": (lambda: transformers.ConvNextModel(transformers.ConvNextConfig(
        hidden_sizes=[8, 16], depths=[1, 1], num_stages=2)), {}, (32, 48, 64)),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", choices=sorted(CASES))
    name = ap.parse_args().model
    make, extra, sides = CASES[name]
    torch.manual_seed(0)
    model = make().eval()
    compiled = pipec.compile(model)
    for side in sides:
        x = torch.randn(1, 3, side, side)
        with warnings.catch_warnings(record=True) as caught, torch.no_grad():
            warnings.simplefilter("always")
            got = compiled(pixel_values=x, **extra).last_hidden_state
            expected = model(pixel_values=x, **extra).last_hidden_state
        error = (got - expected).abs().max().item()
        print(name, side, f"{error:.2e}", [str(w.message)[:1500] for w in caught if "pipec" in str(w.message)])


if __name__ == "__main__":
    main()
