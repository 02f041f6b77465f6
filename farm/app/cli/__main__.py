from farm.app.cli import main

main()
