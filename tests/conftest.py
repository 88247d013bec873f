import pytest
import torch

from minirlhf.models import load_model


@pytest.fixture(scope="session")
def tiny():
    """The shipped tiny GPT-2 and its tokenizer, on CPU, float32."""
    torch.manual_seed(0)
    model, tokenizer = load_model("tiny", device="cpu")
    return model.eval(), tokenizer
