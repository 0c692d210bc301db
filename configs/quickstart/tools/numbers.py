"""Quickstart tool: facts about whole numbers."""


def _is_prime(n: int) -> bool:
    if n < 2:
        return False
    return all(n % d for d in range(2, int(n**0.5) + 1))


def describe(ctx, args):
    n = args["n"]
    prime = "a prime" if _is_prime(n) else "not a prime"
    digit_sum = sum(int(d) for d in str(abs(n)))
    fact = f"{n} is {prime}, is written {bin(n)[2:]} in binary, and its digits add up to {digit_sum}."
    return {"n": n, "prime": _is_prime(n), "binary": bin(n)[2:], "digitSum": digit_sum, "fact": fact}


handlers = {"describe": describe}
