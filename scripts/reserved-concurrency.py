"""The concurrency a deploy reserves: each function's ReservedConcurrentExecutions in
template.yaml, with the parameters an environment of samconfig.toml sets (the others at their
defaults). Prints `<region> <total> <function>=<n> ...` for scripts/concurrency-check.sh.
  python3 scripts/reserved-concurrency.py template.yaml samconfig.toml dev
"""

import sys
import tomllib

import yaml


class CfnLoader(yaml.SafeLoader):
    """YAML with CloudFormation's short tags (!Ref x as {"Ref": x}, !If [...] as {"Fn::If": ...})."""


def _tag(loader, suffix, node):
    if isinstance(node, yaml.ScalarNode):
        value = loader.construct_scalar(node)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)
    name = suffix.lstrip("!")
    if name in ("Ref", "Condition"):
        return {name: value}
    if name == "GetAtt" and isinstance(value, str):
        value = value.split(".", 1)
    return {"Fn::" + name: value}


CfnLoader.add_multi_constructor("!", _tag)


def main(template_path, samconfig_path, env):
    with open(template_path) as f:
        template = yaml.load(f, Loader=CfnLoader)
    with open(samconfig_path, "rb") as f:
        samconfig = tomllib.load(f)
    deploy = samconfig.get(env, {}).get("deploy", {}).get("parameters", {})
    region = deploy.get("region") or samconfig.get(env, {}).get("global", {}).get(
        "parameters", {}
    ).get("region", "")
    params = {k: str(v.get("Default", "")) for k, v in template["Parameters"].items()}
    for pair in deploy.get("parameter_overrides", "").split():
        name, _, value = pair.partition("=")
        if name not in params:
            sys.exit(f"samconfig.toml [{env}] sets {name}, which template.yaml does not declare")
        params[name] = value
    conditions = template.get("Conditions", {})

    def value(v):
        if isinstance(v, dict) and "Ref" in v:
            return params.get(v["Ref"], None if v["Ref"] == "AWS::NoValue" else v["Ref"])
        if isinstance(v, dict) and "Fn::If" in v:
            name, yes, no = v["Fn::If"]
            return value(yes if holds(conditions[name]) else no)
        return v

    def holds(c):
        (fn, args), = c.items()
        if fn == "Fn::Equals":
            return str(value(args[0])) == str(value(args[1]))
        if fn == "Fn::Not":
            return not holds(args[0])
        if fn == "Fn::And":
            return all(holds(a) for a in args)
        if fn == "Fn::Or":
            return any(holds(a) for a in args)
        if fn == "Condition":
            return holds(conditions[args])
        sys.exit(f"condition function {fn} not handled")

    reserved = {}
    for fid, resource in template["Resources"].items():
        if resource.get("Type") != "AWS::Serverless::Function":
            continue
        n = value(resource.get("Properties", {}).get("ReservedConcurrentExecutions"))
        if n is not None:
            reserved[fid] = int(n)
    total = sum(reserved.values())
    print(region, total, *(f"{k}={v}" for k, v in reserved.items() if v))


if __name__ == "__main__":
    main(*sys.argv[1:4])
