"""ResNet for CIFAR (He et al. 2016, pre-activation), as in MXNet's example/image-classification.

Depth 6n+2: three stages of n basic residual units with 16, 32 and 64 filters.
"""
import mxnet as mx

from .args import units_per_stage


def residual_unit(data, num_filter, stride, dim_match, name, bn_mom=0.9):
    bn1 = mx.sym.BatchNorm(data=data, fix_gamma=False, eps=2e-5, momentum=bn_mom, name=name + "_bn1")
    act1 = mx.sym.Activation(data=bn1, act_type="relu", name=name + "_relu1")
    conv1 = mx.sym.Convolution(data=act1, num_filter=num_filter, kernel=(3, 3), stride=stride, pad=(1, 1),
                               no_bias=True, name=name + "_conv1")
    bn2 = mx.sym.BatchNorm(data=conv1, fix_gamma=False, eps=2e-5, momentum=bn_mom, name=name + "_bn2")
    act2 = mx.sym.Activation(data=bn2, act_type="relu", name=name + "_relu2")
    conv2 = mx.sym.Convolution(data=act2, num_filter=num_filter, kernel=(3, 3), stride=(1, 1), pad=(1, 1),
                               no_bias=True, name=name + "_conv2")
    if dim_match:
        shortcut = data
    else:
        shortcut = mx.sym.Convolution(data=act1, num_filter=num_filter, kernel=(1, 1), stride=stride,
                                      no_bias=True, name=name + "_sc")
    return conv2 + shortcut


def cifar_resnet(num_layers, num_classes=10, bn_mom=0.9):
    units = units_per_stage(num_layers)
    filters = (16, 32, 64)
    data = mx.sym.Variable(name="data")
    data = mx.sym.identity(data=data, name="id")
    body = mx.sym.BatchNorm(data=data, fix_gamma=True, eps=2e-5, momentum=bn_mom, name="bn_data")
    body = mx.sym.Convolution(data=body, num_filter=filters[0], kernel=(3, 3), stride=(1, 1), pad=(1, 1),
                              no_bias=True, name="conv0")
    for stage, num_filter in enumerate(filters):
        stride = (1, 1) if stage == 0 else (2, 2)
        body = residual_unit(body, num_filter, stride, stage == 0, f"stage{stage + 1}_unit1", bn_mom)
        for unit in range(2, units + 1):
            body = residual_unit(body, num_filter, (1, 1), True, f"stage{stage + 1}_unit{unit}", bn_mom)
    bn1 = mx.sym.BatchNorm(data=body, fix_gamma=False, eps=2e-5, momentum=bn_mom, name="bn1")
    relu1 = mx.sym.Activation(data=bn1, act_type="relu", name="relu1")
    pool1 = mx.sym.Pooling(data=relu1, global_pool=True, kernel=(7, 7), pool_type="avg", name="pool1")
    flat = mx.sym.Flatten(data=pool1)
    fc1 = mx.sym.FullyConnected(data=flat, num_hidden=num_classes, name="fc1")
    return mx.sym.SoftmaxOutput(data=fc1, name="softmax")
