"""Errors as Python exceptions naming the argument: ValueError for a bad value or shape,
TypeError for a bad dtype, NotImplementedError for what the library cannot serve."""

import numpy as np
import pytest

import tokamax_cpp as tokamax

X = np.zeros((4, 8), np.float32)


def test_bad_dtype_is_a_type_error_naming_the_argument():
    with pytest.raises(TypeError, match="x"):
        tokamax.layer_norm(X.astype(np.int32), None, None)
    with pytest.raises(TypeError, match="scale"):
        tokamax.layer_norm(X, np.zeros(8, np.int32), None)
    with pytest.raises(TypeError, match="complex"):
        tokamax.layer_norm(X.astype(np.complex64), None, None)


def test_bad_shape_is_a_value_error_naming_the_argument():
    with pytest.raises(ValueError, match="scale"):
        tokamax.layer_norm(X, np.ones(7, np.float32), None)
    with pytest.raises(ValueError, match="axis"):
        tokamax.layer_norm(X, None, None, axis=2)
    q = np.zeros((1, 2, 2, 4), np.float32)
    with pytest.raises(ValueError, match="v"):
        tokamax.dot_product_attention(q, q, np.zeros((1, 3, 2, 4), np.float32))


def test_bad_option_values():
    q = np.zeros((1, 2, 2, 4), np.float32)
    with pytest.raises(ValueError, match="logits_soft_cap"):
        tokamax.dot_product_attention(q, q, q, logits_soft_cap=-1.0)
    with pytest.raises(TypeError, match="local_window_size"):
        tokamax.dot_product_attention(q, q, q, local_window_size="wide")
    with pytest.raises(ValueError, match="reduction"):
        tokamax.linear_softmax_cross_entropy_loss(X, np.zeros(4, np.int32), np.zeros((8, 3), np.float32),
                                                  reduction="max")
    with pytest.raises(TypeError, match="epsilon"):
        tokamax.layer_norm(X, None, None, epsilon="small")


def test_bad_attention_layout_is_a_value_error_naming_it():
    q = np.zeros((1, 3, 2, 4), np.float32)
    for layout in ("bnth", "BHTD", None, 0):
        with pytest.raises(ValueError, match="layout"):
            tokamax.dot_product_attention(q, q, q, layout=layout)
    with pytest.raises(ValueError, match="query.*BNTH"):
        tokamax.dot_product_attention(np.zeros((3, 4), np.float32), q, q, layout="BNTH")


def test_what_the_library_lacks_is_not_implemented():
    q = np.zeros((1, 2, 2, 4), np.float32)
    with pytest.raises(NotImplementedError, match="precision"):
        tokamax.dot_product_attention(q, q, q, precision="highest")
    with pytest.raises(NotImplementedError, match="cudnn"):
        tokamax.dot_product_attention(q, q, q, implementation="cudnn")
    with pytest.raises(NotImplementedError, match="offset"):
        tokamax.layer_norm(X, None, np.zeros(8, np.float32), subtract_mean=False)
    with pytest.raises(NotImplementedError, match="group_offset"):
        tokamax.ragged_dot(X, np.zeros((1, 8, 2), np.float32), np.array([4], np.int32), group_offset=0)
    with pytest.raises(NotImplementedError, match="activation"):
        tokamax.gated_linear_unit(X, np.zeros((8, 2, 3), np.float32), activation=np.tanh)


def test_unknown_implementation_is_a_value_error():
    with pytest.raises(ValueError, match="implementation|quantum"):
        tokamax.layer_norm(X, None, None, implementation="quantum")


def test_sequence_of_implementations_falls_through_not_implemented():
    y = tokamax.layer_norm(X, None, None, implementation=("cudnn", "reference"))
    np.testing.assert_array_equal(y, tokamax.layer_norm(X, None, None, implementation="reference"))
    with pytest.raises(NotImplementedError, match="no implementation"):
        tokamax.layer_norm(X, None, None, implementation=("cudnn", "mosaic_tpu"))


def test_unknown_array_type():
    with pytest.raises(TypeError, match="numpy arrays, torch tensors or jax arrays"):
        tokamax.layer_norm([[1.0, 2.0]], None, None)


def test_call_by_name_errors():
    with pytest.raises(TypeError, match="layer_norm takes 3 inputs"):
        tokamax.call("layer_norm", X)
    with pytest.raises(ValueError, match="unknown option"):
        tokamax.call("layer_norm", X, None, None, axes=1)
    with pytest.raises((ValueError, NotImplementedError), match="no_such_op"):
        tokamax.call("no_such_op", X)
